"""Registering tables with the coordinator, and reading their tiering properties.

Used by the procedures (``sys.enable_tiering``, ``sys.disable_tiering``, …),
the gateway's tiered ``CREATE``/``ALTER TABLE`` and the atomic CTAS; each
change is one :meth:`Coordinator.mutate` through the state machine.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tierlake.server.catalog.table_path import TablePath, load_table, parse_table_path
from tierlake.server.coordinator import state_machine as sm
from tierlake.server.coordinator.coordinator import STATE_TABLE
from tierlake.server.coordinator.state_machine import Status, TableState
from tierlake.server.exceptions import NoSuchTableError
from tierlake.server.runtime.jvm import string_map
from tierlake.server.state.state_table import SmallTable

if TYPE_CHECKING:
    from tierlake.server.coordinator.coordinator import Coordinator
    from tierlake.server.sqlapi.context import Context

STATUS_COLUMNS = [
    ("database_name", "string"), ("table_name", "string"), ("status", "string"),
    ("tiering_epoch", "bigint"), ("last_tiered_time", "timestamp"), ("last_error", "string"),
    ("last_error_time", "timestamp"),
]
TIERING_PROPERTY_PREFIXES = ("table.", "primary-key", "bucket.num", "sequence-by")


def coordinator(ctx: Context) -> Coordinator:
    """The server's coordinator, which every registration change goes through."""
    if ctx.coordinator is None:
        raise RuntimeError("this context has no coordinator (the server has not started it)")
    return ctx.coordinator


def status_row(s: TableState) -> tuple:
    """One row of :data:`STATUS_COLUMNS` (the columns of ``sys.lake_tiering_status``)."""
    return (s.database_name, s.table_name, s.status.value if s.status else None, s.tiering_epoch,
            s.last_tiered_time, s.last_error, s.last_error_time)


def iceberg_properties(spark: Any, path: TablePath) -> dict[str, str]:
    """The table's properties, read through Iceberg's API (no SQL text involved)."""
    return string_map(load_table(spark, path).properties())


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


def refresher(spark: Any) -> Callable[[TableState], None]:
    """Re-read a table's tiering properties (freshness may change with ALTER TABLE)."""

    def refresh(state: TableState) -> None:
        try:
            state.properties = tiering_properties(
                iceberg_properties(spark, TablePath(state.database_name, state.table_name))
            )
        except Exception:  # noqa: BLE001 - a dropped table keeps its last known properties
            pass

    return refresh


def rescheduler(ctx: Context, path: TablePath) -> None:
    """Re-read a registered table's properties; a Scheduled table gets its new due time."""
    props = tiering_properties(iceberg_properties(ctx.spark, path))

    def change(states: dict[int, TableState], now: datetime):
        found = find_registered(states, path)
        if found is None:
            return None, False, []
        found.properties = props
        if found.status is Status.SCHEDULED:
            found.next_due = (found.last_tiered_time or now) + found.freshness
        return None, True, []

    coordinator(ctx).mutate(change)


def register_table(
    ctx: Context, path: TablePath, lake: TablePath, initial: Status, tiered_position: int | None = None,
    stream_table: Any = None,
) -> tuple[TableState, bool]:
    """Register ``path`` with the coordinator (idempotent): ``(state, created)``.

    ``tiered_position``: the lake already holds the stream up to there (an
    atomic CTAS filled both), so the first round starts after it. ``stream_table``:
    the stream as the caller loaded it (else loaded here, once).
    """
    if stream_table is None:
        stream_table = load_table(ctx.spark, path)
    props = string_map(stream_table.properties())
    stream_uuid = str(stream_table.uuid())
    coord = coordinator(ctx)

    def change(states: dict[int, TableState], now: datetime):
        found = find_registered(states, path)
        if found is not None:
            return (found, False), False, []
        table_id = coord.new_table_id(states)
        state = TableState(
            table_id, path.database, path.table, lake.database, lake.table, properties=tiering_properties(props)
        )
        state.stream_uuid = stream_uuid
        sm.register(state, initial, now)
        if tiered_position is not None:
            state.tiered_position = tiered_position
            state.last_tiered_time = now
        states[table_id] = state
        # A copy: the coordinator's next check may move the registered state on (Scheduled → Pending)
        # before the caller answers, and the answer is what this registration made.
        return (copy.copy(state), True), True, []

    return coord.mutate(change)


def registered_record(spark: Any, table_id: int) -> tuple[int | None, str | None] | None:
    """``(tiered position, stream UUID)`` the coordinator recorded for ``table_id``: a tiering worker
    cross-checks them when planning (server/changelog/positions.py). None if it is not registered."""
    # Through SmallTable: read from Iceberg's metadata and data files directly, no Spark job per round.
    table = _state_tables.get(id(spark))
    if table is None or table.spark is not spark:
        table = _state_tables[id(spark)] = SmallTable(spark, STATE_TABLE)
    for row in table.load()[1]:
        if row["table_id"] == int(table_id):
            return row["tiered_position"], row["stream_uuid"]
    return None


_state_tables: dict[int, SmallTable] = {}  # one reader per Spark session: its schema (rows are cached process-wide)


def unregister_table(ctx: Context, path: TablePath) -> TableState:
    """Remove ``path``'s registration; a round in progress ends as ``disabled``.

    Returns the state the table had.
    """

    def change(states: dict[int, TableState], now: datetime):
        found = registered(states, path)
        del states[found.table_id]
        return found, True, [sm.disable(found, now)]

    return coordinator(ctx).mutate(change)


def follow_table_change(ctx: Context, path: TablePath, renamed_to: TablePath | None) -> TableState | None:
    """After ``DROP TABLE`` (``renamed_to`` None) of a registered stream table,
    its registration is removed as ``sys.disable_tiering`` would; after a
    rename it follows the table to its new name. None if it was not registered."""

    def change(states: dict[int, TableState], now: datetime):
        found = find_registered(states, path)
        if found is None:
            return None, False, []
        if renamed_to is None:
            del states[found.table_id]
            return found, True, [sm.disable(found, now)]
        found.database_name, found.table_name = renamed_to.database, renamed_to.table
        return found, True, []

    return coordinator(ctx).mutate(change)


def retry_table(ctx: Context, path: TablePath) -> TableState:
    """A Failed table goes Pending now, skipping the retry back-off."""

    def change(states: dict[int, TableState], now: datetime):
        found = registered(states, path)
        sm.retry(found, now)
        return found, True, []

    return coordinator(ctx).mutate(change)


def table_states(ctx: Context, path: TablePath | None = None) -> list[TableState]:
    """Every registered table's state by name, or ``path``'s alone (an error if it is not registered)."""
    _, states = coordinator(ctx).load()
    rows = sorted(states.values(), key=lambda s: (s.database_name, s.table_name))
    if path is not None:
        rows = [s for s in rows if (s.database_name, s.table_name) == (path.database, path.table)]
        if not rows:
            raise NoSuchTableError(f"table {path} is not enabled for tiering")
    return rows
