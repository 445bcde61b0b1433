"""Authentication and authorisation at the gateway.

Without a password file the gateway is in development mode: any user name
and password are accepted and every user may do everything. With
``tierlake.gateway.password-file`` set, logins are checked against it and
each statement needs a role (server/sqlapi/roles.py):

- ``CALL sys.<name>``: the role the procedure declared when it registered
  (:attr:`Procedure.role`; ``admin`` for a name no registry knows); the
  gateway runs these itself, Spark never sees them;
- everything else: decided on Spark's own parse of the statement, deny by
  default (planauth.py; docs/security.md lists what each role may do).
  A statement that does not parse is refused with Spark's parse error.

Every statement is refused past ``tierlake.gateway.max-statement-size``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from tierlake.server.exceptions import (
    PermissionDeniedError,
    StatementTooComplexError,
    StatementTooLargeError,
    TierlakeError,
)
from tierlake.server.gateway.auth import parsecost, planauth
from tierlake.server.gateway.auth.callparse import call_head, is_sys_call
from tierlake.server.gateway.auth.passwords import PasswordFile
from tierlake.server.gateway.auth.planauth import Requirement
from tierlake.server.sqlapi import roles as R
from tierlake.server.sqlapi.functions import _cli_service
from tierlake.server.sqlapi.registry import default as default_registry

log = logging.getLogger("tierlake.gateway")

DEFAULT_MAX_STATEMENT = 1024 * 1024
SYS_DATABASE = planauth.SYS_DATABASE


def call_requirement(statement: str, registry: Any = None) -> Requirement:
    """The role ``CALL sys.<name>(…)`` needs: its procedure's role."""
    # The name as the handler reads it before anything else (call_head): a CALL
    # it cannot read that way is refused there, so no other reading can run.
    head = call_head(statement)
    if head is None:
        return Requirement(R.READER, "CALL")
    name = head.name
    try:
        proc = registry.get(name) if registry is not None else None
    except TierlakeError:
        # Syntax errors and unknown names are the handler's to report;
        # nothing runs.
        return Requirement(R.READER, "CALL")
    if proc is None:
        try:
            proc = default_registry.get(name)
        except TierlakeError:
            return Requirement(R.ADMIN, f"CALL sys.{name}")
    return Requirement(proc.role, f"CALL sys.{name}")


def configure_policy(spark: Any) -> None:
    """Hand the authorisation policy (policy.json, the one planauth read) to Spark's check rule
    (io.tierlake.internal.AuthzCheck), which refuses every non-admin statement until it has one."""
    spark.sparkContext._jvm.io.tierlake.internal.AuthzCheck.configure(planauth.policy_text())


class SparkSessions:
    """The Spark side of authorisation: each Thrift session's own
    SparkSession (its parser and current database), found through the
    Spark Thrift Server's operation manager; the driver's session when the
    gateway does not know the session (its parser is the same)."""

    def __init__(self, spark: Any, thrift_server: Any = None):
        # Before any session can be bound to a role: both lines decide on the same policy.
        configure_policy(spark)
        self.spark = spark
        self.thrift_server = thrift_server
        self._sessions: dict[bytes, Any] = {}
        self._lock = threading.Lock()
        self._functions: frozenset[str] = frozenset()
        self._functions_at = 0.0
        self._data_sources: dict[str, bool] = {}
        self._bound: set[bytes] = set()

    def session(self, guid: bytes | None, secret: bytes | None) -> Any:
        if guid is None or secret is None or self.thrift_server is None:
            return self.spark._jsparkSession
        with self._lock:
            cached = self._sessions.get(guid)
        if cached is not None:
            return cached
        jvm = self.spark.sparkContext._jvm
        manager = _cli_service(self.thrift_server).getSessionManager().getOperationManager()
        ident = jvm.org.apache.hive.service.cli.HandleIdentifier(
            jvm.java.util.UUID.fromString(str(uuid.UUID(bytes=bytes(guid)))),
            jvm.java.util.UUID.fromString(str(uuid.UUID(bytes=bytes(secret)))))
        protocol = jvm.org.apache.hive.service.rpc.thrift.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V1
        context = manager.sessionToContexts().get(jvm.org.apache.hive.service.cli.SessionHandle(ident, protocol))
        if context is None:
            raise PermissionDeniedError("permission denied: the session is unknown to Spark")
        jsession = context.sparkSession()
        with self._lock:
            if len(self._sessions) > 10_000:
                self._sessions.clear()
            self._sessions[guid] = jsession
        return jsession

    def forget(self, guid: bytes) -> None:
        with self._lock:
            self._sessions.pop(guid, None)
            self._bound.discard(guid)

    def bind_role(self, guid: bytes | None, secret: bytes | None, role: str, user: str | None = None) -> None:
        """Have Spark check every plan the client session ``guid`` analyses as ``role``
        (io.tierlake.internal.AuthzCheck), once per session, before its first statement runs."""
        if guid is None or secret is None or self.thrift_server is None:
            return
        with self._lock:
            if guid in self._bound:
                return
        jsession = self.session(guid, secret)
        self.spark.sparkContext._jvm.io.tierlake.internal.AuthzCheck.bind(jsession, role, user)
        with self._lock:
            if len(self._bound) > 10_000:
                self._bound.clear()  # re-bound on their next statement: the same role, harmless
            self._bound.add(guid)

    @staticmethod
    def current_database(jsession: Any) -> str:
        return str(jsession.catalog().currentDatabase()).lower()

    def data_source(self, jsession: Any) -> Any:
        """``name -> bool``: whether Spark resolves ``name`` as a data source (its own lookup, as
        ResolveSQLOnFile does, so every spelling it accepts counts). Answers are kept per name
        (bounded): the lookup walks the data-source service registry."""
        from pyspark import SparkContext

        def lookup(name: str) -> bool:
            with self._lock:
                known = self._data_sources.get(name)
            if known is not None:
                return known
            found = bool(SparkContext._jvm.io.tierlake.internal.PlanWalker.isDataSource(jsession, name))
            with self._lock:
                if len(self._data_sources) > 10_000:
                    self._data_sources.clear()
                self._data_sources[name] = found
            return found
        return lookup

    def functions(self, jsession: Any, wanted: set[str]) -> frozenset[str]:
        """Known function names; re-read (at most every 10 s) when one of
        ``wanted`` is missing, so UDFs registered later are found."""
        if not self._functions or (wanted - self._functions and time.monotonic() - self._functions_at > 10):
            self._functions = planauth.function_names(jsession)
            self._functions_at = time.monotonic()
        return self._functions


class Authorizer:
    """Logins and per-statement checks; ``passwords=None`` is development mode.

    Statements are checked on Spark's parse: :meth:`attach` gives the
    authorizer the Spark side once Spark runs; until then every statement
    (other than ``CALL sys.…``) is refused."""

    def __init__(self, passwords: PasswordFile | None = None, registry: Any = None,
                 max_statement_size: int = DEFAULT_MAX_STATEMENT):
        self.passwords = passwords
        self.registry = registry
        self.max_statement_size = max_statement_size
        self.sessions: SparkSessions | None = None

    def attach(self, sessions: SparkSessions) -> Authorizer:
        self.sessions = sessions
        return self

    @property
    def enabled(self) -> bool:
        return self.passwords is not None

    def authenticate(self, user: str, password: str, checks: threading.Semaphore | None = None) -> bool:
        """``checks``: the budget of concurrent password checks of the door asking (None: the gateway's)."""
        return True if self.passwords is None else self.passwords.authenticate(user, password, checks)

    def roles(self, user: str | None) -> frozenset[str]:
        return frozenset(R.ROLES) if self.passwords is None else self.passwords.roles(user)

    def check_size(self, statement: str) -> None:
        size = len(statement.encode("utf-8", "surrogatepass"))
        if size > self.max_statement_size:
            raise StatementTooLargeError(
                f"statement too large: {size} bytes; tierlake.gateway.max-statement-size is "
                f"{self.max_statement_size} bytes")
        # Iceberg's parser runs regexes over the text first; a few shapes make them quadratic (parsecost.py).
        if parsecost.steps(statement) > parsecost.MAX_STEPS:
            raise StatementTooLargeError(
                "statement refused: its comment markers would cost the SQL parser time quadratic in its "
                "length (a long line of '--' with no newline after it, or of '/*' with no '*/'); "
                "break the line or close the comments")
        depth = parsecost.nesting(statement)
        if depth > parsecost.MAX_NESTING:
            raise StatementTooComplexError(
                f"statement too complex: parentheses nested more than {parsecost.MAX_NESTING} deep; "
                "Spark's parser cannot take it (split the statement, or use WITH for nested subqueries)")

    def requirement(self, statement: str, session: Any = None, parsed: Any = None) -> Requirement:
        """The role ``statement`` needs in ``session`` (a SessionInfo, or
        None for the driver's session). ``parsed(plan)`` receives Spark's parse (the gateway keeps it
        on the statement: nothing after this parses the statement again)."""
        if is_sys_call(statement):
            return call_requirement(statement, self.registry)
        if self.sessions is None:
            return Requirement(planauth.NOBODY, "any statement before Spark started")
        jsession = self.sessions.session(getattr(session, "session_guid", None), getattr(session, "secret", None))
        plan = planauth.parse_plan(jsession, statement)
        if parsed is not None:
            parsed(plan)
        database = self.sessions.current_database(jsession)
        if session is not None:
            session.database = database
        functions = {n.seqs[0][-1].lower() for n in plan.nodes.values()
                     if n.name == "UnresolvedFunction" and n.seqs and n.seqs[0]}
        functions |= {n.strings[0].lower() for n in plan.nodes.values()
                      if n.name == "UnresolvedGenerator" and n.strings}
        return planauth.requirement(plan, database, self.sessions.functions(jsession, functions),
                                    self.sessions.data_source(jsession))

    def parser(self, session: Any):
        """Spark's parse in ``session``'s own SparkSession, for a statement nothing authorised
        (development mode): the parse the authoriser would have made. None before Spark started."""
        sessions = self.sessions
        if sessions is None:
            return None

        def parse(text: str) -> Any:
            jsession = sessions.session(getattr(session, "session_guid", None), getattr(session, "secret", None))
            # Routing reads the root (and a SET's key): a statement of a million literals is not walked.
            return planauth.parse_plan(jsession, text, planauth.ROUTING_PLAN_NODES, whole=False)
        return parse

    def check_role(self, user: str | None, role: str, what: str) -> None:
        """Raise :class:`PermissionDeniedError` unless ``user`` holds ``role``
        (or a role granting it)."""
        held = self.roles(user)
        if R.allows(held, role):
            return
        log.warning("denied %s to user %r (roles %s)", what, user, sorted(held))
        raise PermissionDeniedError(
            f"permission denied: {what} needs the {' or '.join(sorted(R.GRANTED_BY[role]))} role; "
            f"user {user!r} has {', '.join(sorted(held)) or 'no role'}"
        )

    def check(self, user: str | None, statement: Any, session: Any = None) -> None:
        """Raise :class:`PermissionDeniedError` (or a parse / size error)
        unless ``user`` may run ``statement``: a gateway :class:`Statement`, whose ``plan`` this sets
        to Spark's parse, or a text with its ``session`` (tests, the Admin API)."""
        text = statement if isinstance(statement, str) else statement.text
        if not isinstance(statement, str):
            session = statement.session
        self.check_size(text)
        if self.passwords is None:
            return
        if self.sessions is not None and session is not None:
            held = self.roles(user)
            spark_role = next((r for r in (R.ADMIN, R.WRITER) if R.allows(held, r)), R.READER)
            self.sessions.bind_role(getattr(session, "session_guid", None), getattr(session, "secret", None),
                                    spark_role, user)
            if hasattr(session, "role"):
                session.role = spark_role  # the gateway's own Spark sessions for it run as this role too
        keep = None if isinstance(statement, str) else statement.authorised
        need = self.requirement(text, session, keep)
        if need.role is planauth.NOBODY:
            log.warning("denied %s to user %r", need.what, user)
            raise PermissionDeniedError(f"permission denied: {need.what} is not allowed")
        self.check_role(user, need.role, need.what)
