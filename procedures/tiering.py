"""Tiering coordination: the heartbeat and the operators' procedures."""

from __future__ import annotations

from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.catalog.tiered_tables import prepare_existing
from tierlake.server.changelog import fresh_view
from tierlake.server.coordinator.registration import (
    STATUS_COLUMNS,
    coordinator,
    existing_table,
    iceberg_properties,
    refresher,
    register_table,
    retry_table,
    status_row,
    table_states,
    unregister_table,
)
from tierlake.server.coordinator.state_machine import FailedEntry, FinishedEntry, Status, TieringEntry
from tierlake.server.exceptions import InvalidArgumentError
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import ADMIN, READER, TIERING


@registry.procedure(
    returns=[("kind", "string"), ("table_id", "bigint"), ("table_path", "string"),
             ("tiering_epoch", "bigint"), ("error", "string")],
    role=TIERING,
)
def heartbeat(
    ctx: Context,
    job_id: str,
    tiering_tables: list[TieringEntry] = (),
    finished_tables: list[FinishedEntry] = (),
    failed_tables: list[FailedEntry] = (),
    request_table: bool = False,
    job_started: bool = False,
):
    """A tiering job's heartbeat: report progress, results and failures; ask for a table.

    Entries are handled in this order: failed, in progress, finished, then (with
    request_table) the most overdue Pending table is assigned with a new epoch.
    Every entry gets its own answer row; a stale epoch or unknown table is an
    error for that entry only. Error messages are cut to 2048 characters.

    Args:
      job_id: the tiering job's persistent id
      tiering_tables: tables in progress (renews their heartbeat): named_struct('table_id', id, 'tiering_epoch', epoch)
      finished_tables: finished rounds with force_finished flag, rows, bytes, files and the tiered_position reached
      failed_tables: failed rounds with an optional error_message
      request_table: assign a Pending table to this job if there is one
      job_started: the job's first heartbeat since it started: tables still assigned to job_id from an
        earlier run of the job (killed, or stopped without finishing) are released at once (outcome
        'abandoned', their epoch fenced) instead of after the heartbeat timeout
    """
    if not job_id.strip():
        raise InvalidArgumentError("parameter 'job_id' must not be empty")
    answers = coordinator(ctx).heartbeat(
        job_id, list(tiering_tables), list(finished_tables), list(failed_tables), request_table,
        refresh_properties=refresher(ctx.spark), job_started=job_started,
    )
    return [a.row() for a in answers]


@registry.procedure(
    returns=[("table_id", "bigint"), ("table_path", "string"), ("lake_table", "string"),
             ("status", "string"), ("created", "boolean")],
    role=ADMIN,
)
def enable_tiering(ctx: Context, table: str):
    """Register an existing Iceberg table for tiering into its lake table.

    The lake table is <db>_lake.<table> (setting tierlake.lake.database-suffix).
    Calling it again for a registered table changes nothing (created = false).
    The table's properties are checked first; a primary-key table with NULL
    keys is refused with their count, else its key columns become NOT NULL.

    Args:
      table: the stream table, db.table
    """
    path = existing_table(ctx.spark, table)
    try:
        iceberg_properties(ctx.spark, path)
    except Exception as e:
        raise InvalidArgumentError(
            f"table {path} is not an Iceberg table; tiering needs an Iceberg stream table"
        ) from e
    lake = prepare_existing(ctx.spark, ctx.config, path)
    state, created = register_table(ctx, path, lake, Status.INITIALIZED)
    fresh_view.create(ctx.spark, ctx.config, path, lake)
    return [(state.table_id, str(path), f"{state.lake_database}.{state.lake_table}", state.status.value, created)]


@registry.procedure(
    returns=[("table_id", "bigint"), ("table_path", "string"), ("previous_status", "string")], role=ADMIN
)
def disable_tiering(ctx: Context, table: str):
    """Stop tiering a table; its coordinator state and last error are removed.

    A round in progress ends: the job's next heartbeat for it is answered with
    an error, and its lake commit is fenced. The stream and lake tables stay.

    Args:
      table: the stream table, db.table
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    found = unregister_table(ctx, path)
    fresh_view.drop(ctx.spark, ctx.config, path)
    return [(found.table_id, str(path), found.status.value if found.status else None)]


@registry.procedure(returns=STATUS_COLUMNS, role=READER, read_only=True)
def list_tiering_statuses(ctx: Context, table: str | None = None):
    """Tiering status of every registered table, or of one (the columns of sys.lake_tiering_status).

    Args:
      table: only this table (db.table); NULL for all
    """
    path = None if table is None else parse_table_path(table, ctx.spark.catalog.currentDatabase())
    return [status_row(s) for s in table_states(ctx, path)]


@registry.procedure(returns=STATUS_COLUMNS, role=ADMIN)
def retry_tiering(ctx: Context, table: str):
    """Move a Failed table back to Pending now, skipping the retry back-off.

    Args:
      table: the stream table, db.table
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    return [status_row(retry_table(ctx, path))]


@registry.procedure(
    returns=[
        ("job_id", "string"),
        ("first_seen", "timestamp"),
        ("last_heartbeat", "timestamp"),
        ("rounds_finished", "bigint"),
        ("rounds_failed", "bigint"),
        ("tiering_tables", "array<string>"),
    ],
    role=READER,
    read_only=True,
)
def tiering_job_status(ctx: Context):
    """Tiering jobs that have sent heartbeats, with the tables each is tiering now."""
    return [tuple(r) for r in ctx.spark.table("sys.tiering_job_status").orderBy("job_id").collect()]
