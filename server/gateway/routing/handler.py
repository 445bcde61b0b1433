"""Two of the gateway's routes (router.py): ``CALL sys.*`` runs Python procedures (:class:`CallHandler`);
tiered DDL, recognised on Spark's parse, runs in the engine (:class:`DdlHandler`; server/tiering/ddl.py,
one entry point: ``run``)."""

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
from tierlake.server.gateway.auth.callparse import call_head, is_sys_call, parse_call
from tierlake.server.gateway.routing.ddl import may_be_tiering_ddl, parse_tiered_create, parse_tiering_alter
from tierlake.server.gateway.routing.fresh_ddl import (
    COLUMN_ROOTS,
    column_change_of,
    may_change_columns,
    may_change_table,
    table_change_of,
)
from tierlake.server.gateway.transport.protocol import LocalResult, Statement
from tierlake.server.runtime import jvm_errors
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.registry import Registry
from tierlake.server.sqlapi.roles import ADMIN, TIERING
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


# Spark's plan classes of the statements DdlHandler takes.
CREATE_ROOTS = frozenset({"CreateTable", "CreateTableAsSelect", "ReplaceTable", "ReplaceTableAsSelect"})
ALTER_ROOTS = frozenset({"SetTableProperties"})
TABLE_CHANGE_ROOTS = frozenset({"DropTable", "RenameTable"})
DDL_ROOTS = CREATE_ROOTS | ALTER_ROOTS | TABLE_CHANGE_ROOTS | COLUMN_ROOTS


class _BadCreate:
    """A tiered CREATE whose reading failed: routed to the DDL handler, which answers with the error."""

    def __init__(self, error: TierlakeError):
        self.error = error


def parse_tiered_create_safe(statement: str):
    # Routing must not raise: a bad tiered CREATE is answered by execute().
    try:
        return parse_tiered_create(statement)
    except TierlakeError as e:
        return _BadCreate(e)


class DdlHandler:
    """Route ``ddl``: a tiered CREATE, a tiering ALTER, a DROP/RENAME or a column change of a table with
    a fresh view: DDL the gateway runs itself, in the engine. It acts on the gateway's reading of the
    statement (its columns and properties), so it needs ``admin`` whatever Spark's parse in the client's
    session allowed (:attr:`role`; the transport checks it).

    Decided on Spark's parse, never on a second parser's: the statement's
    plan (the authoriser's, or the one parse made for it) must have one of
    the DDL roots. Only then does sqlglot read a tiered CREATE's columns and
    properties or an ALTER's properties; a query, however large and whatever
    words it holds, is never read by sqlglot. A DROP, RENAME or column change
    runs the very plan that was decided on (``tiered_ddl.run`` with the plan),
    never a parse of its own."""

    name = "ddl"
    role = ADMIN
    what = "this DDL of a tiered table"

    def __init__(self, context_factory: Callable[[str | None], Context]):
        self.context_factory = context_factory

    def claim(self, statement: Statement) -> bool:
        command = self.command(statement)
        if command is None:
            return False
        statement.prepared = command
        return True

    def command(self, statement: Statement):
        """What the gateway runs itself for ``statement`` (a :mod:`server.tiering.ddl` command), or None."""
        text = statement.text
        if is_sys_call(text):
            return None
        # Substring tests spare every other statement a parse where nothing parsed it yet (development mode).
        plan = statement.parsed(may_be_tiering_ddl(text) or may_change_table(text) or may_change_columns(text))
        if plan is None or plan.root is None or plan.root.name not in DDL_ROOTS:
            return None
        root = plan.root.name
        if root in CREATE_ROOTS:
            return parse_tiered_create_safe(text)
        if root in ALTER_ROOTS:
            alter = parse_tiering_alter(text)
            return None if alter is None else tiered_ddl.TieringAlter(*alter)
        spark = self.context_factory(None).spark
        if root in TABLE_CHANGE_ROOTS:
            change = table_change_of(plan.java)
        else:
            change = column_change_of(plan.java)
        if change is None:
            return None
        properties = tiered_ddl.fresh_view_properties(spark, change.table)
        if properties is None:
            return None
        return change.with_plan(plan.java, properties)

    def execute(self, statement: Statement) -> LocalResult:
        command = statement.prepared
        user = statement.session.user
        try:
            if isinstance(command, _BadCreate):
                raise command.error
            result = tiered_ddl.run(self.context_factory(user), command, statement.text, user)
        except TierlakeError:
            raise
        except Exception as e:
            raise spark_error(e) from e
        return LocalResult(columns=result.columns, rows=result.rows)

    def session_closed(self, guid: bytes) -> None:
        pass


class CallHandler:
    """Route ``call``: ``CALL sys.<name>(...)``, run by its Python procedure (Spark never sees it)."""

    name = "call"
    role = None  # the procedure's own role, which the authoriser checked
    what = "CALL sys.…"

    def __init__(self, registry: Registry, context_factory: Callable[[str | None], Context],
                 max_call_size: int = DEFAULT_MAX_CALL_SIZE):
        self.registry = registry
        self.context_factory = context_factory
        self.max_call_size = max_call_size

    def claim(self, statement: Statement) -> bool:
        return is_sys_call(statement.text)

    def execute(self, statement: Statement) -> LocalResult:
        return self.call(statement.text, user=statement.session.user)

    def session_closed(self, guid: bytes) -> None:
        pass

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
