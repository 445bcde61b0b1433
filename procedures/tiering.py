"""Tiering coordination: the heartbeat and the operators' procedures."""

from __future__ import annotations

from typing import Any

from tierlake import sql
from tierlake.procedures.registry import Context, registry
from tierlake.server.coordinator import state_machine as sm
from tierlake.server.exceptions import InvalidArgumentError, NoSuchTableError
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.coordinator.state_machine import FailedEntry, FinishedEntry, Status, TableState, TieringEntry
from tierlake.server.catalog.table_path import TablePath, parse_table_path
from tierlake.server.catalog.tiered_tables import prepare_existing

STATUS_COLUMNS = [
    ("database_name", "string"), ("table_name", "string"), ("status", "string"),
    ("tiering_epoch", "bigint"), ("last_tiered_time", "timestamp"), ("last_error", "string"),
    ("last_error_time", "timestamp"),
]
Q_MAX_TABLE_ID = "queries/max_table_id.sql"
TIERING_PROPERTY_PREFIXES = ("table.", "primary-key", "bucket.num", "sequence-by")


def coordinator(ctx: Context):
    return ctx.extras["server"].coordinator


def status_row(s: TableState) -> tuple:
    return (s.database_name, s.table_name, s.status.value if s.status else None, s.tiering_epoch,
            s.last_tiered_time, s.last_error, s.last_error_time)


def iceberg_properties(spark: Any, path: TablePath) -> dict[str, str]:
    """The table's properties, read through Iceberg's API (no SQL text involved)."""
    table = iceberg_table(spark, path.quoted)
    return {str(k): str(v) for k, v in dict(table.properties()).items()}


def tiering_properties(all_props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in all_props.items() if k.startswith(TIERING_PROPERTY_PREFIXES)}


def existing_table(spark: Any, name: str) -> TablePath:
    path = parse_table_path(name, spark.catalog.currentDatabase())
    if not spark.catalog.tableExists(path.quoted):
        raise NoSuchTableError(f"table {path} does not exist")
    return path


def find_registered(states: dict[int, TableState], path: TablePath) -> TableState | None:
    return next((s for s in states.values() if (s.database_name, s.table_name) == (path.database, path.table)), None)


def registered(states: dict[int, TableState], path: TablePath) -> TableState:
    """The registered state of ``path`` or a clear error."""
    found = find_registered(states, path)
    if found is None:
        raise NoSuchTableError(f"table {path} is not enabled for tiering")
    return found


def refresher(spark: Any):
    """Re-read a table's tiering properties (freshness may change with ALTER TABLE)."""

    def refresh(state: TableState) -> None:
        try:
            state.properties = tiering_properties(iceberg_properties(spark, TablePath(state.database_name, state.table_name)))
        except Exception:  # noqa: BLE001 - a dropped table keeps its last known properties
            pass

    return refresh


def rescheduler(ctx: Context, path: TablePath) -> None:
    """Re-read a registered table's properties; a Scheduled table gets its new due time."""
    props = tiering_properties(iceberg_properties(ctx.spark, path))

    def change(states, now):
        found = find_registered(states, path)
        if found is None:
            return None, False, []
        found.properties = props
        if found.status is Status.SCHEDULED:
            found.next_due = (found.last_tiered_time or now) + found.freshness
        return None, True, []

    coordinator(ctx).mutate(change)


@registry.procedure(
    returns=[("kind", "string"), ("table_id", "bigint"), ("table_path", "string"),
             ("tiering_epoch", "bigint"), ("error", "string")],
)
def heartbeat(
    ctx: Context,
    job_id: str,
    tiering_tables: list[TieringEntry] = (),
    finished_tables: list[FinishedEntry] = (),
    failed_tables: list[FailedEntry] = (),
    request_table: bool = False,
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
    """
    if not job_id.strip():
        raise InvalidArgumentError("parameter 'job_id' must not be empty")
    answers = coordinator(ctx).heartbeat(
        job_id, list(tiering_tables), list(finished_tables), list(failed_tables), request_table,
        refresh_properties=refresher(ctx.spark),
    )
    return [a.row() for a in answers]


@registry.procedure(
    returns=[("table_id", "bigint"), ("table_path", "string"), ("lake_table", "string"),
             ("status", "string"), ("created", "boolean")],
)
def enable_tiering(ctx: Context, table: str):
    """Register an existing Iceberg table for tiering into its lake table.

    The lake table is <db>_lake.<table> (setting tierlake.lake.database-suffix).
    Calling it again for a registered table changes nothing (created = false).

    Args:
      table: the stream table, db.table
    """
    path = existing_table(ctx.spark, table)
    try:
        iceberg_properties(ctx.spark, path)
    except Exception as e:  # noqa: BLE001 - not an Iceberg table
        raise InvalidArgumentError(f"table {path} is not an Iceberg table; tiering needs an Iceberg stream table") from e
    lake = prepare_existing(ctx.spark, ctx.config, path)
    state, created = register_table(ctx, path, lake, Status.INITIALIZED)
    return [(state.table_id, str(path), f"{state.lake_database}.{state.lake_table}", state.status.value, created)]


def register_table(ctx: Context, path: TablePath, lake: TablePath, initial: Status,
                   tiered_position: int | None = None) -> tuple[TableState, bool]:
    """Register ``path`` with the coordinator (idempotent): ``(state, created)``.

    ``tiered_position``: the lake already holds the stream up to there (an
    atomic CTAS filled both), so the first round starts after it.
    """
    props = iceberg_properties(ctx.spark, path)
    next_id = ctx.spark.sql(sql.read(Q_MAX_TABLE_ID)).collect()[0]["max_id"] + 1

    def change(states, now):
        found = find_registered(states, path)
        if found is not None:
            return (found, False), False, []
        table_id = max([next_id, *(s.table_id + 1 for s in states.values())])
        state = TableState(table_id, path.database, path.table, lake.database, lake.table,
                           properties=tiering_properties(props))
        sm.register(state, initial, now)
        if tiered_position is not None:
            state.tiered_position = tiered_position
            state.last_tiered_time = now
        states[table_id] = state
        return (state, True), True, []

    return coordinator(ctx).mutate(change)


@registry.procedure(returns=[("table_id", "bigint"), ("table_path", "string"), ("previous_status", "string")])
def disable_tiering(ctx: Context, table: str):
    """Stop tiering a table; its coordinator state and last error are removed.

    A round in progress ends: the job's next heartbeat for it is answered with
    an error, and its lake commit is fenced. The stream and lake tables stay.

    Args:
      table: the stream table, db.table
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())

    def change(states, now):
        found = registered(states, path)
        del states[found.table_id]
        rnd = sm.Round(found.table_id, found.database_name, found.table_name, found.tiering_epoch,
                       found.job_id, found.round_started, now, found.tiered_position, found.tiered_position,
                       None, None, None, "disabled", None)
        return found, True, [rnd]

    found = coordinator(ctx).mutate(change)
    return [(found.table_id, str(path), found.status.value if found.status else None)]


@registry.procedure(returns=STATUS_COLUMNS, read_only=True)
def list_tiering_statuses(ctx: Context, table: str | None = None):
    """Tiering status of every registered table, or of one (the columns of sys.lake_tiering_status).

    Args:
      table: only this table (db.table); NULL for all
    """
    _, states = coordinator(ctx).load()
    rows = sorted(states.values(), key=lambda s: (s.database_name, s.table_name))
    if table is not None:
        path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
        rows = [s for s in rows if (s.database_name, s.table_name) == (path.database, path.table)]
        if not rows:
            raise NoSuchTableError(f"table {path} is not enabled for tiering")
    return [status_row(s) for s in rows]


@registry.procedure(returns=STATUS_COLUMNS)
def retry_tiering(ctx: Context, table: str):
    """Move a Failed table back to Pending now, skipping the retry back-off.

    Args:
      table: the stream table, db.table
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())

    def change(states, now):
        found = registered(states, path)
        sm.retry(found, now)
        return found, True, []

    return [status_row(coordinator(ctx).mutate(change))]


@registry.procedure(
    returns=[("job_id", "string"), ("first_seen", "timestamp"), ("last_heartbeat", "timestamp"),
             ("rounds_finished", "bigint"), ("rounds_failed", "bigint"), ("tiering_tables", "array<string>")],
    read_only=True,
)
def tiering_job_status(ctx: Context):
    """Tiering jobs that have sent heartbeats, with the tables each is tiering now."""
    return [tuple(r) for r in ctx.spark.table("sys.tiering_job_status").orderBy("job_id").collect()]
