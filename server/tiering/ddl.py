"""Tiered DDL, run by the engine behind one entry point, :func:`run`.

The gateway only recognises the statement, on Spark's own parse in the
session that runs it (server/gateway/routing/ddl.py reads a tiered CREATE's columns
and properties or a tiering ALTER's properties; server/gateway/routing/fresh_ddl.py a
qualified DROP TABLE or RENAME of a tiered table), and hands what it
recognised here with the statement. Everything that follows happens here:

- :class:`TieredCreate` — ``CREATE TABLE … TBLPROPERTIES('table.datalake.enabled'='true')``
  (and its ``AS SELECT``): the properties checked before anything exists, the
  stream and lake tables created, the table registered, its fresh view made
  (docs/tiering.md, "Creating a tiered table");
- :class:`TieringAlter` — ``ALTER TABLE … SET TBLPROPERTIES`` of tiering
  properties: checked with the table's other properties and its columns, run,
  and the table rescheduled at once (a shorter freshness must not wait for the
  end of the current interval);
- :class:`TableChange` — ``DROP TABLE`` / ``ALTER TABLE … RENAME TO`` of a
  tiered table or one with a fresh view: run, the view dropped or moved with
  the table, the registration removed or moved (docs/tiering.md, "Fresh
  views", Lifecycle).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tierlake.server.catalog import properties as table_properties
from tierlake.server.catalog.columns import table_columns
from tierlake.server.catalog.properties import ENABLED, FRESH_VIEW_PROPERTY
from tierlake.server.catalog.spec import Column
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.catalog.tiered_tables import create_tiered_table, lake_of
from tierlake.server.changelog import fresh_view
from tierlake.server.coordinator.registration import (
    follow_table_change,
    iceberg_properties,
    register_table,
    rescheduler,
)
from tierlake.server.coordinator.state_machine import Status
from tierlake.server.exceptions import TableExistsError
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.sqlapi.context import Context
from tierlake.server.tiering.ctas import RESULT_COLUMNS, create_table_as
from tierlake.server.tiering.leftover import refuse_leftover_lake

log = logging.getLogger("tierlake.calls")

CREATED_COLUMNS = [("table_id", "bigint"), ("table_path", "string"), ("lake_table", "string"), ("status", "string")]
NO_COLUMNS = [("Result", "string")]


@dataclass
class TieredCreate:
    table: TablePath
    columns: list[Column]
    properties: dict[str, str]
    if_not_exists: bool
    as_select: str | None


@dataclass(frozen=True)
class TieringAlter:
    table: TablePath
    properties: dict[str, str]  # the tiering properties the statement sets


@dataclass(frozen=True)
class TableChange:
    table: TablePath
    renamed_to: TablePath | None  # None: DROP TABLE


Command = TieredCreate | TieringAlter | TableChange


@dataclass(frozen=True)
class DdlResult:
    columns: list[tuple[str, str]]
    rows: list[tuple]


def run(ctx: Context, command: Command, statement: str, user: str | None = None) -> DdlResult:
    """Run one tiered DDL statement the gateway recognised as ``command`` (the module docstring)."""
    if isinstance(command, TieredCreate):
        return create(ctx, command, user)
    if isinstance(command, TieringAlter):
        return alter(ctx, command, statement, user)
    if isinstance(command, TableChange):
        return change(ctx, command, statement)
    raise TypeError(f"not a tiered DDL command: {command!r}")


def create(ctx: Context, create: TieredCreate, user: str | None = None) -> DdlResult:
    """``CREATE TABLE … TBLPROPERTIES('table.datalake.enabled'='true')`` [``AS SELECT``]."""
    # Before anything exists: a bad property must not leave a table behind (CTAS checks its own).
    table_properties.validate(create.properties, create.columns or None)
    refuse_leftover_lake(ctx.spark, ctx.config, create.table)  # DROP then CREATE: the old lake rows
    if create.as_select is not None:
        # A column list with AS SELECT never gets here: Spark's parse refuses it first.
        rows = create_table_as(ctx, create.table, create.as_select, create.properties, create.if_not_exists)
        return DdlResult(RESULT_COLUMNS, rows)
    if ctx.spark.catalog.tableExists(create.table.quoted):
        if not create.if_not_exists:
            raise TableExistsError(f"table {create.table} already exists")
        return DdlResult(CREATED_COLUMNS, [])
    lake = create_tiered_table(ctx.spark, ctx.config, create.table, create.columns, create.properties)
    state, _ = register_table(ctx, create.table, lake, Status.NEW)
    fresh_view.create(ctx.spark, ctx.config, create.table, lake)
    log.info("created tiered table %s (id %d) by %s", create.table, state.table_id, user)
    return DdlResult(CREATED_COLUMNS, [(state.table_id, str(create.table), str(lake), state.status.value)])


def alter(ctx: Context, alter: TieringAlter, statement: str, user: str | None = None) -> DdlResult:
    """``ALTER TABLE … SET TBLPROPERTIES ('table.datalake.…' = …)``: check the values (with the
    table's other properties and its columns, see :func:`properties.validate`), run the statement,
    and reschedule the table."""
    path, properties = alter.table, alter.properties
    columns, existing, iceberg = None, {}, False
    if ctx.spark.catalog.tableExists(path.quoted):  # else Spark's own error, from the statement
        columns = table_columns(ctx.spark, path)
        try:
            existing, iceberg = table_properties.user_properties(iceberg_properties(ctx.spark, path)), True
        except Exception:  # noqa: BLE001 - not an Iceberg table: nothing of it is tiered
            pass
    table_properties.validate(properties, columns)  # what the statement sets, first
    table_properties.validate({**existing, **properties}, columns)  # then together (sequence-by needs primary-key)
    ctx.spark.sql(statement)
    if iceberg:
        rescheduler(ctx, path)
    log.info("tiering properties of %s changed by %s: %s", path, user, properties)
    return DdlResult(NO_COLUMNS, [])


def has_fresh_view(spark: Any, table: TablePath) -> bool:
    """The table exists and is tiered or names a fresh view (a cheap metadata read, only for DROP/RENAME
    statements): the gateway hands such a statement to :func:`run`, which keeps the view and the
    registration in step."""
    try:
        props = dict(iceberg_table(spark, table.quoted).properties())
    except Exception:  # noqa: BLE001 - not an Iceberg table, or no such table: Spark answers the statement
        return False
    return FRESH_VIEW_PROPERTY in props or str(props.get(ENABLED, "")).lower() == "true"


def change(ctx: Context, change: TableChange, statement: str) -> DdlResult:
    """Run ``statement`` (a DROP TABLE or RENAME), then drop the fresh view or move it with the renamed
    table; a dropped stream table is no longer tiered, a renamed one keeps being tiered under its new
    name (into the same lake table: the stream table's property says which it is)."""
    spark, config = ctx.spark, ctx.config
    props = {str(k): str(v) for k, v in dict(iceberg_table(spark, change.table.quoted).properties()).items()}
    view = fresh_view.view_of(spark, change.table)
    spark.sql(statement)
    if view is not None:
        fresh_view.drop_view(spark, view)
    if change.renamed_to is not None:
        fresh_view.create(spark, config, change.renamed_to, lake_of(config, change.table, props))
    follow_table_change(ctx, change.table, change.renamed_to)
    return DdlResult(NO_COLUMNS, [])
