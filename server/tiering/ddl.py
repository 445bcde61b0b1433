"""Tiered DDL, run by the engine behind one entry point, :func:`run`.

The gateway only recognises the statement, on Spark's one parse of it in
the client's session (server/gateway/routing/ddl.py reads a tiered CREATE's columns
and properties or a tiering ALTER's properties; server/gateway/routing/fresh_ddl.py a
qualified DROP TABLE or RENAME of a tiered table, which then runs as that
very plan), and hands what it recognised here with the statement.
Everything that follows happens here:

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

Each is atomic (docs/design.md §17): its steps run in order, each with what
undoes it (:class:`Steps`); when one fails, what the earlier steps made is
undone in reverse order and the client gets a :class:`TieredDdlError` naming
the step, its cause, and what was undone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from tierlake import sql
from tierlake.server.catalog import properties as table_properties
from tierlake.server.catalog.columns import table_columns
from tierlake.server.catalog.properties import ENABLED, FRESH_VIEW_PROPERTY
from tierlake.server.catalog.spec import Column, TieredSpec, refuse_odd_field_names
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.catalog.tiered_tables import (
    T_CREATE_DATABASE,
    T_DROP_DATABASE,
    T_DROP_TABLE,
    create_lake_table,
    create_stream_table,
    lake_of,
    lake_path,
    stream_properties,
)
from tierlake.server.changelog import fresh_view, lake_write
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.coordinator.registration import (
    follow_table_change,
    iceberg_properties,
    register_table,
    rescheduler,
)
from tierlake.server.coordinator.state_machine import Status
from tierlake.server.exceptions import TableExistsError, TieredDdlError, TierlakeError
from tierlake.server.runtime import jvm_errors
from tierlake.server.runtime.jvm import string_map
from tierlake.server.sqlapi.context import Context
from tierlake.server.tiering.ctas import RESULT_COLUMNS, T_RENAME, create_table_as
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
    """``DROP TABLE`` or ``ALTER TABLE … RENAME TO`` of a tiered table or one with a fresh view.

    ``plan``: Spark's parse of the statement, which :func:`change` runs (the statement is not parsed
    again); ``properties``: the table's, as read when the statement was recognised (not loaded again)."""

    table: TablePath
    renamed_to: TablePath | None  # None: DROP TABLE
    plan: Any = field(default=None, compare=False, repr=False)
    properties: dict[str, str] | None = field(default=None, compare=False, repr=False)

    def with_plan(self, plan: Any, properties: dict[str, str]) -> TableChange:
        return replace(self, plan=plan, properties=properties)


@dataclass(frozen=True)
class ColumnChange:
    """ALTER TABLE … ADD/DROP/RENAME/ALTER/REPLACE COLUMN(S) of a table with a fresh view (``plan`` and
    ``properties`` as for :class:`TableChange`)."""

    table: TablePath
    plan: Any = field(default=None, compare=False, repr=False)
    properties: dict[str, str] | None = field(default=None, compare=False, repr=False)

    def with_plan(self, plan: Any, properties: dict[str, str]) -> ColumnChange:
        return replace(self, plan=plan, properties=properties)


Command = TieredCreate | TieringAlter | TableChange | ColumnChange


@dataclass(frozen=True)
class DdlResult:
    columns: list[tuple[str, str]]
    rows: list[tuple]


T = TypeVar("T")


def _state_of(e: BaseException) -> str | None:
    """The SQLSTATE a client would get for ``e`` (tierlake's, Spark's, or none)."""
    if isinstance(e, TierlakeError):
        return e.sqlstate
    try:
        return jvm_errors.sqlstate(e)  # Spark's, or tierlake's for Iceberg's catalog exceptions (they carry none)
    except Exception:  # noqa: BLE001 - no state to keep
        return None


def _first_line(e: BaseException) -> str:
    # A raw py4j error (pyspark's carry a desc): "An error occurred while calling o1.x" says nothing,
    # what Java said does.
    found = jvm_errors.failure(e) if getattr(e, "desc", None) is None else None
    if found is not None:
        return found.summary
    text = e.message if isinstance(e, TierlakeError) else (getattr(e, "desc", None) or str(e))
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _already_exists(e: BaseException) -> bool:
    return isinstance(e, TableExistsError) or jvm_errors.is_(e, jvm_errors.Kind.ALREADY_EXISTS)


class Steps:
    """The steps of one tiered DDL statement, each with what undoes it.

    :meth:`run` runs a step; when it fails, every earlier step's undo runs
    (newest first; an undo that fails is logged and named, the others still
    run) and :class:`TieredDdlError` names the statement, the step, its cause
    and what was undone. A step's own undo runs too when it may have made part
    of its object before failing (``partial``), unless it failed because the
    object exists (made by someone else).
    """

    def __init__(self, statement: str):
        self.statement = statement
        self.undo: list[tuple[str, Callable[[], Any]]] = []

    def run(self, step: str, fn: Callable[[], T], undo: tuple[str, Callable[[], Any]] | None = None,
            partial: bool = False) -> T:
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 - an interrupted step is undone too, then re-raised
            if undo is not None and partial and not _already_exists(e):
                self.undo.append(undo)
            self.fail(step, e)
        if undo is not None:
            self.undo.append(undo)
        return result

    def fail(self, step: str, e: BaseException) -> None:
        undone, failed = [], []
        for what, fn in reversed(self.undo):
            try:
                fn()
                undone.append(what)
            except Exception as u:
                log.warning("%s: undoing %r after step %r failed: %s", self.statement, what, step, u, exc_info=True)
                failed.append(f"{what} ({_first_line(u)})")
        self.undo.clear()
        message = f"{self.statement} failed at step '{step}': {_first_line(e)}"
        if undone:
            message += f"; undone: {', '.join(undone)}"
        if failed:
            message += f"; COULD NOT undo: {', '.join(failed)} (remove by hand)"
        elif not undone:
            message += "; nothing was made"
        log.info("%s", message)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise e
        raise TieredDdlError(message, _state_of(e)) from e


def run(ctx: Context, command: Command, statement: str, user: str | None = None) -> DdlResult:
    """Run one tiered DDL statement the gateway recognised as ``command`` (the module docstring)."""
    if isinstance(command, TieredCreate):
        return create(ctx, command, user)
    if isinstance(command, TieringAlter):
        return alter(ctx, command, statement, user)
    if isinstance(command, TableChange):
        return change(ctx, command, statement)
    if isinstance(command, ColumnChange):
        return change_columns(ctx, command, statement)
    raise TypeError(f"not a tiered DDL command: {command!r}")


def create(ctx: Context, create: TieredCreate, user: str | None = None) -> DdlResult:
    """``CREATE TABLE … TBLPROPERTIES('table.datalake.enabled'='true')`` [``AS SELECT``].

    Atomic (:class:`Steps`): the stream table, the lake database (if this made it), the lake table, the
    registration, the fresh view database (if this made it) and the view are made in that order; a
    failing step undoes the earlier ones."""
    # Before anything exists: a bad property must not leave a table behind (CTAS checks its own).
    table_properties.validate(create.properties, create.columns or None)
    spark, config, stream = ctx.spark, ctx.config, create.table
    stream_exists = spark.catalog.tableExists(stream.quoted)
    # DROP then CREATE: the old lake rows. A lake table kept from an earlier stream table of this name and
    # never tiered into is used as it is (and never dropped here).
    lake_existed = refuse_leftover_lake(spark, config, stream, stream_exists)
    if create.as_select is not None:
        # A column list with AS SELECT never gets here: Spark's parse refuses it first.
        rows = create_table_as(ctx, create.table, create.as_select, create.properties, create.if_not_exists)
        return DdlResult(RESULT_COLUMNS, rows)
    if stream_exists:
        if not create.if_not_exists:
            raise TableExistsError(f"table {stream} already exists")
        return DdlResult(CREATED_COLUMNS, [])
    # Every column and property checked (reserved names, struct field names) before anything is made.
    spec = TieredSpec.from_properties(create.properties, create.columns)
    refuse_odd_field_names(create.columns)
    lake = lake_path(config, stream)
    view = fresh_view.fresh_path(config, stream)
    # Each table is loaded once, when first needed after it was made, and read from this handle after.
    handle = TableHandle(spark, stream, lake, config)
    steps = Steps(f"CREATE TABLE {stream}")
    steps.run(f"create the stream table {stream}",
              lambda: create_stream_table(spark, stream, create.columns, spec,
                                          stream_properties(create.properties, lake)),
              undo=(f"stream table {stream} dropped", lambda: _drop_table(spark, stream)), partial=True)
    _create_database(steps, spark, lake.database, "lake")
    steps.run(f"create the lake table {lake}",
              lambda: create_lake_table(spark, stream, lake, create.columns, spec, tables=handle),
              undo=None if lake_existed else (f"lake table {lake} dropped", lambda: _drop_table(spark, lake)),
              partial=True)
    state, _ = steps.run("register the table with the coordinator",
                         lambda: register_table(ctx, stream, lake, Status.NEW, stream_table=handle.stream_table),
                         undo=("registration removed", lambda: follow_table_change(ctx, stream, None)), partial=True)
    _create_database(steps, spark, view.database, "fresh view")
    steps.run(f"create the fresh view {view}", lambda: fresh_view.create(spark, config, stream, lake, handle),
              undo=(f"fresh view {view} dropped", lambda: fresh_view.drop_view(spark, view)), partial=True)
    log.info("created tiered table %s (id %d) by %s", stream, state.table_id, user)
    return DdlResult(CREATED_COLUMNS, [(state.table_id, str(stream), str(lake), state.status.value)])


def _drop_table(spark: Any, table: TablePath) -> None:
    spark.sql(sql.render(T_DROP_TABLE, table=[table.database, table.table], purge=True))


def _create_database(steps: Steps, spark: Any, database: str, what: str) -> None:
    """The step that makes ``database`` if it does not exist (undone only then, and only if empty)."""
    if spark.catalog.databaseExists(database):
        return

    def drop() -> None:
        if not any(not t.isTemporary for t in spark.catalog.listTables(database)):
            spark.sql(sql.render(T_DROP_DATABASE, database=database))

    steps.run(f"create the {what} database {database}",
              lambda: spark.sql(sql.render(T_CREATE_DATABASE, database=database)),
              undo=(f"{what} database {database} dropped", drop), partial=True)


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
    steps = Steps(f"ALTER TABLE {path}")
    if not iceberg:
        steps.run("run the statement", lambda: ctx.spark.sql(statement))
    else:
        before = iceberg_properties(ctx.spark, path)
        steps.run("set the table properties", lambda: ctx.spark.sql(statement),
                  undo=("table properties restored", lambda: _restore_properties(ctx.spark, path, properties, before)))
        steps.run("reschedule the table", lambda: rescheduler(ctx, path))
    log.info("tiering properties of %s changed by %s: %s", path, user, properties)
    return DdlResult(NO_COLUMNS, [])


def fresh_view_properties(spark: Any, path: TablePath) -> dict[str, str] | None:
    """The table's properties if it exists and is tiered or names a fresh view (one metadata read, only
    for DROP/RENAME and column changes), else None: the gateway hands such a statement to :func:`run`
    with these properties, and it keeps the view and the registration in step."""
    try:
        props = string_map(load_table(spark, path).properties())
    except Exception:  # noqa: BLE001 - not an Iceberg table, or no such table: Spark answers the statement
        return None
    return props if FRESH_VIEW_PROPERTY in props or str(props.get(ENABLED, "")).lower() == "true" else None


def _run_statement(spark: Any, command: TableChange | ColumnChange, statement: str) -> Any:
    """Run the statement a command was recognised from: its plan as parsed when the gateway decided on
    it (one parse per statement, and what runs is what was decided), else its text."""
    if command.plan is None:
        return spark.sql(statement)
    from pyspark.sql import DataFrame

    jvm = spark.sparkContext._jvm
    return DataFrame(jvm.org.apache.spark.sql.Dataset.ofRows(spark._jsparkSession, command.plan), spark)


def _restore_properties(spark: Any, path: TablePath, keys: dict[str, str], before: dict[str, str]) -> None:
    """Set ``keys`` of ``path``'s properties back to ``before`` (removed where they were absent)."""
    update = load_table(spark, path).updateProperties()
    for key in keys:
        update = update.set(key, before[key]) if key in before else update.remove(key)
    update.commit()


def change(ctx: Context, change: TableChange, statement: str) -> DdlResult:
    """Run ``statement`` (a DROP TABLE or RENAME) with the fresh view and the registration in step: a
    dropped stream table is no longer tiered, a renamed one keeps being tiered under its new name (into
    the same lake table: the stream table's property says which it is).

    Steps (:class:`Steps`): the view is dropped first (undone by making it again), then the statement
    runs (a RENAME is undone by renaming back; a DROP cannot be undone, so nothing that can fail
    comes after it but the registration, whose failure the error says how to finish); after a RENAME
    the view is made under the new name, and the registration follows the table."""
    spark, config, table, target = ctx.spark, ctx.config, change.table, change.renamed_to
    props = change.properties
    if props is None:
        props = string_map(load_table(spark, table).properties())
    lake = lake_of(config, table, props)
    view = fresh_view.view_of(spark, table, props)
    steps = Steps(f"{'DROP TABLE' if target is None else 'ALTER TABLE … RENAME'} {table}")
    if view is not None:
        steps.run(f"drop the fresh view {view}", lambda: fresh_view.drop_view(spark, view),
                  undo=(f"fresh view {view} made again", lambda: fresh_view.create(spark, config, table, lake)))
    if target is None:
        steps.run("drop the table", lambda: _run_statement(spark, change, statement))
        steps.undo.clear()  # dropped: nothing before this can be undone any more
        steps.run("remove the registration (the table is dropped; finish with "
                  f"CALL sys.disable_tiering('{table}') if it is still listed)",
                  lambda: follow_table_change(ctx, table, None))
        return DdlResult(NO_COLUMNS, [])
    steps.run(f"rename the table to {target}", lambda: _run_statement(spark, change, statement),
              undo=(f"table renamed back to {table}", lambda: spark.sql(sql.render(
                  T_RENAME, source=[target.database, target.table], target=[table.database, table.table]))))
    made = fresh_view.fresh_path(config, target)
    steps.run(f"create the fresh view {made}", lambda: fresh_view.create(spark, config, target, lake),
              undo=(f"fresh view {made} dropped", lambda: fresh_view.drop_view(spark, made)), partial=True)
    steps.run("move the registration", lambda: follow_table_change(ctx, table, target))
    return DdlResult(NO_COLUMNS, [])


def change_columns(ctx: Context, change: ColumnChange, statement: str) -> DdlResult:
    """Run ``statement`` (a column change of a table with a fresh view), then carry it to the lake
    table and re-pin the view before answering. The view names the stream's columns and shows the
    lake's names: after a DROP or RENAME COLUMN it failed with an internal error ("Unresolved
    attributes found when constructing LocalRelation", or an internal alias that "cannot be
    resolved"), and after a RENAME showed the old name, until the next round synced the lake and
    re-pinned it (docs/tiering.md, "Schema changes": the round still syncs, a no-op then).

    An ALTER cannot be undone once it ran: a sync or re-pin that fails (a round committing to the
    lake at that moment) is logged and left to the next round (the stream moved, so even an idle
    table gets one), and the ALTER is still answered."""
    spark, stream = ctx.spark, change.table
    Steps(f"ALTER TABLE {stream}").run("change the columns", lambda: _run_statement(spark, change, statement))
    try:
        handle = TableHandle.of(spark, ctx.config, stream)  # its stream as the ALTER left it
        if str(handle.properties.get(ENABLED, "")).lower() == "true":
            lake_write.sync_lake_schema(handle)
            fresh_view.repin_if_schema_changed(handle)
    except Exception:  # the next round does it
        log.warning("the lake and fresh view of %s were not brought up to its new columns; its next round will",
                    stream, exc_info=True)
    return DdlResult(NO_COLUMNS, [])
