"""Repairing a stream table's history: ``sys.drop_stream_commit``."""

from __future__ import annotations

from tierlake.server.changelog.stream_repair import RESULT_COLUMNS
from tierlake.server.changelog.stream_repair import drop_stream_commit as drop_commit
from tierlake.server.coordinator.registration import existing_table
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import ADMIN


@registry.procedure(returns=RESULT_COLUMNS, role=ADMIN)
def drop_stream_commit(ctx: Context, table: str, snapshot_id: int):
    """Take a non-append commit (a DELETE, UPDATE, MERGE or overwrite) out of a stream table, keeping every append.

    Rolls the table back to the snapshot before it and re-applies the appends
    committed after it, oldest first, in one commit; later commits that are
    not appends are dropped with it. Stop the table's writers first. One row
    per commit from it on: what was done and the new snapshot of a re-applied
    append. The error of a round that met the commit names this call.

    Args:
      table: the stream table, db.table
      snapshot_id: the commit to take out (the snapshot id the error names)
    """
    path = existing_table(ctx.spark, table)
    return drop_commit(ctx.spark, path, snapshot_id)
