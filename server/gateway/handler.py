"""The gateway's statement handler: ``CALL sys.*`` runs Python procedures."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tierlake.server.catalog import properties as table_properties
from tierlake.server.catalog.columns import table_columns
from tierlake.server.catalog.tiered_tables import create_tiered_table
from tierlake.server.changelog import fresh_view
from tierlake.server.coordinator.registration import (
    follow_table_change,
    iceberg_properties,
    register_table,
    rescheduler,
)
from tierlake.server.coordinator.state_machine import Status
from tierlake.server.exceptions import SparkSqlError, SqlSyntaxError, TableExistsError, TierlakeError
from tierlake.server.gateway import planauth
from tierlake.server.gateway.callparse import is_sys_call, parse_call
from tierlake.server.gateway.ddl import may_be_tiering_ddl, parse_tiered_create, parse_tiering_alter
from tierlake.server.gateway.fresh_ddl import (
    has_fresh_view,
    may_change_table,
    run_table_change,
    spark_root,
    spark_table_change,
)
from tierlake.server.gateway.protocol import LocalResult, SessionInfo
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.registry import Registry
from tierlake.server.sqlapi.roles import TIERING
from tierlake.server.tiering.ctas import RESULT_COLUMNS, create_table_as

log = logging.getLogger("tierlake.calls")


_ICEBERG_STATES = {
    "NoSuchNamespaceException": "3F000",
    "NoSuchTableException": "42P01",
    "AlreadyExistsException": "42P07",
    "ValidationException": "22023",
    "CommitFailedException": "40001",
}


def spark_error(e: Exception) -> TierlakeError:
    """A Spark (py4j-captured) exception as a SQL error for the client."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    if isinstance(e, CapturedException):
        state = e.getSqlState() if hasattr(e, "getSqlState") else None
        lines = [line for line in (getattr(e, "desc", None) or str(e)).strip().splitlines() if line.strip()]
        message = lines[0] if lines else type(e).__name__
        if type(e).__name__ == "PythonException" and len(lines) > 1:
            # The first line only says "see the stack trace below"; the
            # Python error a UDF raised is the last.
            message = f"{message} {lines[-1].strip()}"
        return SparkSqlError(message, state)
    if isinstance(e, Py4JJavaError):
        # Iceberg's catalog exceptions are not Spark errors and reach py4j raw.
        java = e.java_exception
        name = str(java.getClass().getSimpleName())
        return SparkSqlError(f"{name}: {java.getMessage()}", _ICEBERG_STATES.get(name, "XX000"))
    return SparkSqlError(f"{type(e).__name__}: {e}", "XX000")


# Spark's plan classes for the statements runs_ddl takes.
CREATE_ROOTS = frozenset({"CreateTable", "CreateTableAsSelect", "ReplaceTable", "ReplaceTableAsSelect"})
ALTER_ROOTS = frozenset({"SetTableProperties"})
TABLE_CHANGE_ROOTS = frozenset({"DropTable", "RenameTable"})
DDL_ROOTS = CREATE_ROOTS | ALTER_ROOTS | TABLE_CHANGE_ROOTS


def parse_tiered_create_safe(statement: str):
    # wants() must not raise: a bad tiered CREATE is answered by execute().
    try:
        return parse_tiered_create(statement)
    except TierlakeError:
        return True


class CallHandler:
    """Answers ``CALL sys.<name>(...)``; every other statement goes to Spark."""

    def __init__(self, registry: Registry, context_factory: Callable[[str | None], Context]):
        self.registry = registry
        self.context_factory = context_factory

    def wants(self, statement: str) -> bool:
        return is_sys_call(statement) or self.runs_ddl(statement)

    def runs_ddl(self, statement: str) -> bool:
        """A tiered CREATE, a tiering ALTER, or a DROP/RENAME of a table with
        a fresh view: DDL the gateway runs itself (admin only, whatever the
        statement's parse, see server.py)."""
        return self._ddl(statement) is not None

    def _ddl(self, statement: str):
        """What the gateway runs itself for ``statement``: ``"create"``,
        ``"alter"``, a :class:`TableChange`, or None (relayed to Spark).

        Decided on Spark's parse, never on a second parser's: the
        authoriser's parse in the client's session (planauth.recall) must
        have one of the DDL roots, and so must the parse in the session that
        runs the DDL. Only then does sqlglot read a tiered CREATE's columns
        and properties or an ALTER's properties; a query, however large and
        whatever words it holds, is neither parsed again nor read by sqlglot.
        A text two parsers read differently (comment tricks) is relayed to
        Spark, which runs what was authorised."""
        if is_sys_call(statement):
            return None
        authorised = planauth.recall(statement)
        if authorised is not None:
            if authorised.root.name not in DDL_ROOTS:
                return None
        elif not (may_be_tiering_ddl(statement) or may_change_table(statement)):
            # No parse yet (development mode, or another thread): substring tests spare the rest a parse.
            return None
        root = self._spark_root(statement)
        if root in CREATE_ROOTS:
            return "create" if parse_tiered_create_safe(statement) is not None else None
        if root in ALTER_ROOTS:
            return "alter" if parse_tiering_alter(statement) is not None else None
        if root in TABLE_CHANGE_ROOTS:
            return self._fresh_view_change(statement)
        return None

    def _jsession(self):
        return self.context_factory(None).spark._jsparkSession

    def _spark_root(self, statement: str) -> str | None:
        return spark_root(self._jsession(), statement)

    def _fresh_view_change(self, statement: str):
        """DROP/RENAME of a tiered table or one with a fresh view (server/gateway/fresh_ddl.py)."""
        change = spark_table_change(self._jsession(), statement)
        if change is None or not has_fresh_view(self.context_factory(None).spark, change.table):
            return None
        return change

    def execute(self, statement: str, session: SessionInfo) -> LocalResult:
        if is_sys_call(statement):
            return self.call(statement, user=session.user)
        try:
            ddl = self._ddl(statement)
            if ddl == "create":
                return self.create_tiered(statement, user=session.user)
            if ddl == "alter":
                return self.alter_tiering(statement, user=session.user)
            if ddl is None:
                raise SqlSyntaxError("not a statement the gateway runs itself")
            ctx = self.context_factory(session.user)
            run_table_change(ctx.spark, ctx.config, ddl, statement)
            # A dropped stream table is no longer tiered; a renamed one keeps being tiered under its new name.
            follow_table_change(ctx, ddl.table, ddl.renamed_to)
            return LocalResult(columns=[("Result", "string")], rows=[])
        except TierlakeError:
            raise
        except Exception as e:
            raise spark_error(e) from e

    def alter_tiering(self, statement: str, user: str | None = None) -> LocalResult:
        """``ALTER TABLE … SET TBLPROPERTIES ('table.datalake.…' = …)``: check the
        values (with the table's other properties and its columns, see
        :func:`properties.validate`), run the statement, and reschedule the
        table at once (a shorter freshness must not wait for the end of the
        current interval)."""
        path, properties = parse_tiering_alter(statement)
        ctx = self.context_factory(user)
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
        return LocalResult(columns=[("Result", "string")], rows=[])

    def create_tiered(self, statement: str, user: str | None = None) -> LocalResult:
        """``CREATE TABLE … TBLPROPERTIES('table.datalake.enabled'='true')``."""
        ctx = self.context_factory(user)
        create = parse_tiered_create(statement)
        # Before anything exists: a bad property must not leave a table behind (CTAS checks its own).
        table_properties.validate(create.properties, create.columns or None)
        columns = [("table_id", "bigint"), ("table_path", "string"), ("lake_table", "string"), ("status", "string")]
        if create.as_select is not None:
            # A column list with AS SELECT never gets here: Spark's parse refuses it first.
            rows = create_table_as(ctx, create.table, create.as_select, create.properties, create.if_not_exists)
            return LocalResult(columns=RESULT_COLUMNS, rows=rows)
        if ctx.spark.catalog.tableExists(create.table.quoted):
            if not create.if_not_exists:
                raise TableExistsError(f"table {create.table} already exists")
            return LocalResult(columns=columns, rows=[])
        lake = create_tiered_table(ctx.spark, ctx.config, create.table, create.columns, create.properties)
        state, _ = register_table(ctx, create.table, lake, Status.NEW)
        fresh_view.create(ctx.spark, ctx.config, create.table, lake)
        log.info("created tiered table %s (id %d) by %s", create.table, state.table_id, user)
        return LocalResult(columns=columns, rows=[(state.table_id, str(create.table), str(lake), state.status.value)])

    def call(self, statement: str, user: str | None = None) -> LocalResult:
        """Parse and run one CALL; also used in-process (Admin API, tests)."""
        started = time.monotonic()
        try:
            parsed = parse_call(statement)
            proc = self.registry.get(parsed.name)
            rows = proc.invoke(self.context_factory(user), parsed.args, parsed.kwargs)
        except TierlakeError as e:
            log.info("CALL failed (%s) in %.3fs: %s", type(e).__name__, time.monotonic() - started, e.message)
            raise
        # Reads, and the tiering protocol's calls (a heartbeat per second per job), are what every client
        # does all the time: at INFO they were most of the log. Calls that change something stay at INFO.
        routine = proc.read_only or proc.role == TIERING
        log.log(logging.DEBUG if routine else logging.INFO, "CALL sys.%s by %s: %d row(s) in %.3fs", proc.name, user,
                len(rows), time.monotonic() - started)
        return LocalResult(columns=list(proc.returns), rows=rows)
