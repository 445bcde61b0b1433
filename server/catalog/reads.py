"""Reading an Iceberg table by name, as of a snapshot, between two snapshots or on a branch.

Every read goes through Spark's catalog by the table's quoted name. Iceberg's own
``spark.read.format("iceberg").load(name)`` is never used for a table: its source takes any
name holding a ``/`` for a file path, so a table named ```a/b``` was not found
(``TABLE_OR_VIEW_NOT_FOUND`` on ```a`.`b`#snapshot_id_…``)."""

from __future__ import annotations

from typing import Any

from tierlake import sql
from tierlake.server.catalog.table_path import TablePath

T_READ_TABLE = "templates/read_table.sql.j2"


def at_snapshot(spark: Any, path: TablePath, snapshot_id: int | None) -> Any:
    """``path`` as of ``snapshot_id`` (None: now), read with that snapshot's schema: a column renamed
    since has its old name, one added since is absent (as Iceberg's ``snapshot-id`` read)."""
    return spark.sql(sql.render_checked(T_READ_TABLE, table=[path.database, path.table],
                                        version=None if snapshot_id is None else int(snapshot_id)))


def between(spark: Any, path: TablePath, start: int, end: int) -> Any:
    """The rows the appends after snapshot ``start`` up to ``end`` added (Iceberg's incremental read),
    with the table's current schema."""
    return (spark.read.option("start-snapshot-id", str(int(start))).option("end-snapshot-id", str(int(end)))
            .table(path.quoted))


def on_branch(spark: Any, path: TablePath, ref: str) -> Any:
    """``path``'s rows on branch ``ref``, with the table's current schema."""
    return spark.read.option("branch", ref).table(path.quoted)
