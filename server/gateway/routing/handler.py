"""The gateway's statement handler: ``CALL sys.*`` runs Python procedures; tiered DDL, recognised
here on Spark's parse, runs in the engine (server/tiering/ddl.py, one entry point: ``run``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tierlake.server.exceptions import (
    JAVA_EXCEPTION_STATES,
    SparkSqlError,
    SqlSyntaxError,
    StatementTooLargeError,
    TierlakeError,
)
from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.auth.callparse import call_head, is_sys_call, parse_call
from tierlake.server.gateway.routing.ddl import may_be_tiering_ddl, parse_tiered_create, parse_tiering_alter
from tierlake.server.gateway.routing.fresh_ddl import (
    COLUMN_ROOTS,
    may_change_columns,
    may_change_table,
    spark_column_change,
    spark_root,
    spark_table_change,
)
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo
from tierlake.server.runtime import jvm_errors
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.registry import Registry
from tierlake.server.sqlapi.roles import TIERING
from tierlake.server.tiering import ddl as tiered_ddl

log = logging.getLogger("tierlake.calls")

MAX_CALL_SIZE = "tierlake.gateway.max-call-size"
DEFAULT_MAX_CALL_SIZE = 64 * 1024


_ICEBERG_STATES = JAVA_EXCEPTION_STATES


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
    if isinstance(e, Py4JJavaError) and (found := jvm_errors.failure(e)) is not None and found.classes:
        # Iceberg's catalog exceptions are not Spark errors and reach py4j raw.
        name = found.classes[0].rpartition(".")[2].rpartition("$")[2]
        return SparkSqlError(f"{name}: {found.message}", _ICEBERG_STATES.get(name, "XX000"))
    return SparkSqlError(f"{type(e).__name__}: {e}", "XX000")


# Spark's plan classes for the statements runs_ddl takes.
CREATE_ROOTS = frozenset({"CreateTable", "CreateTableAsSelect", "ReplaceTable", "ReplaceTableAsSelect"})
ALTER_ROOTS = frozenset({"SetTableProperties"})
TABLE_CHANGE_ROOTS = frozenset({"DropTable", "RenameTable"})
DDL_ROOTS = CREATE_ROOTS | ALTER_ROOTS | TABLE_CHANGE_ROOTS | COLUMN_ROOTS


def parse_tiered_create_safe(statement: str):
    # wants() must not raise: a bad tiered CREATE is answered by execute().
    try:
        return parse_tiered_create(statement)
    except TierlakeError:
        return True


class CallHandler:
    """Answers ``CALL sys.<name>(...)``; every other statement goes to Spark."""

    def __init__(self, registry: Registry, context_factory: Callable[[str | None], Context],
                 max_call_size: int = DEFAULT_MAX_CALL_SIZE):
        self.registry = registry
        self.context_factory = context_factory
        self.max_call_size = max_call_size

    def wants(self, statement: str) -> bool:
        return is_sys_call(statement) or self.runs_ddl(statement)

    def runs_ddl(self, statement: str) -> bool:
        """A tiered CREATE, a tiering ALTER, a DROP/RENAME or a column change of a
        table with a fresh view: DDL the gateway runs itself (admin only, whatever the
        statement's parse, see transport/server.py)."""
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
        elif not (may_be_tiering_ddl(statement) or may_change_table(statement) or may_change_columns(statement)):
            # No parse yet (development mode, or another thread): substring tests spare the rest a parse.
            return None
        root = self._spark_root(statement)
        if root in CREATE_ROOTS:
            return "create" if parse_tiered_create_safe(statement) is not None else None
        if root in ALTER_ROOTS:
            return "alter" if parse_tiering_alter(statement) is not None else None
        if root in TABLE_CHANGE_ROOTS:
            return self._fresh_view_change(statement)
        if root in COLUMN_ROOTS:
            return self._column_change(statement)
        return None

    def _jsession(self):
        return self.context_factory(None).spark._jsparkSession

    def _spark_root(self, statement: str) -> str | None:
        return spark_root(self._jsession(), statement)

    def _fresh_view_change(self, statement: str):
        """DROP/RENAME of a tiered table or one with a fresh view (server/gateway/routing/fresh_ddl.py)."""
        change = spark_table_change(self._jsession(), statement)
        if change is None or not tiered_ddl.has_fresh_view(self.context_factory(None).spark, change.table):
            return None
        return change

    def _column_change(self, statement: str):
        """A column change of a tiered table or one with a fresh view: its view is re-pinned with it."""
        change = spark_column_change(self._jsession(), statement)
        if change is None or not tiered_ddl.has_fresh_view(self.context_factory(None).spark, change.table):
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
            return self._run(ddl, statement, session.user)
        except TierlakeError:
            raise
        except Exception as e:
            raise spark_error(e) from e

    def _run(self, command: tiered_ddl.Command, statement: str, user: str | None) -> LocalResult:
        result = tiered_ddl.run(self.context_factory(user), command, statement, user)
        return LocalResult(columns=result.columns, rows=result.rows)

    def alter_tiering(self, statement: str, user: str | None = None) -> LocalResult:
        """``ALTER TABLE … SET TBLPROPERTIES ('table.datalake.…' = …)`` (server/tiering/ddl.py, ``alter``)."""
        path, properties = parse_tiering_alter(statement)
        return self._run(tiered_ddl.TieringAlter(path, properties), statement, user)

    def create_tiered(self, statement: str, user: str | None = None) -> LocalResult:
        """``CREATE TABLE … TBLPROPERTIES('table.datalake.enabled'='true')`` (server/tiering/ddl.py, ``create``)."""
        return self._run(parse_tiered_create(statement), statement, user)

    def _callable(self, statement: str):
        """The procedure a CALL names, checked with its arity and the text's
        size before a costly parse of its arguments (cheap refusals first):
        the authoriser decides the role on the same reading (callparse.call_head)."""
        head = call_head(statement)
        if head is None:
            if len(statement) <= self.max_call_size:
                parse_call(statement)  # says what is wrong with it
            raise SqlSyntaxError("cannot parse CALL: expected CALL sys.<procedure>(<arguments>)")
        proc = self.registry.get(head.name)
        proc.check_positional(head.positional)  # a named argument too many is left to bind, which names it
        size = len(statement.encode("utf-8", "surrogatepass"))
        if size > self.max_call_size:
            raise StatementTooLargeError(
                f"CALL too large: {size} bytes; {MAX_CALL_SIZE} is {self.max_call_size} bytes")
        return proc

    def call(self, statement: str, user: str | None = None) -> LocalResult:
        """Parse and run one CALL; also used in-process (Admin API, tests)."""
        started = time.monotonic()
        try:
            proc = self._callable(statement)
            parsed = parse_call(statement)
            if parsed.name != proc.name:
                raise SqlSyntaxError(f"cannot parse CALL: expected CALL sys.{proc.name}(<arguments>)")
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
