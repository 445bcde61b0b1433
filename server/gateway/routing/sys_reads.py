"""Status reads at dashboard concurrency: the gateway's ``sys`` read cache.

A BI dashboard asks the same few questions of ``sys`` views again and again
(``SELECT * FROM sys.lake_tiering_status``, what Superset generates for a
chart). Each one used to be a Spark job (~70 ms of a 2-core driver that also
tiers); 32 clients saturated it. Here the gateway answers repeated
statements that read only ``sys`` state from the result Spark gave for the
same text, as long as that state has not changed since:

- **Which statements.** Decided on Spark's own parse of the text (the
  statement's one parse, its unresolved plan read as JSON through one py4j
  call), never on a second parser: a query (only query plan nodes:
  Project, Filter, Aggregate, Join, Sort, Limit, CTEs, set operations,
  subqueries) whose every relation is ``sys.<name>`` (or a CTE), whose
  functions are Spark built-ins that do not depend on the time, the session
  or chance (no ``now()``, ``current_timestamp``, ``rand()``,
  ``current_user()``…), over ``sys`` tables and views whose own definitions
  pass the same test (``sys.lake_tiering_lag`` uses ``current_timestamp()``:
  it always goes to Spark). Sessions that changed a setting (``SET``, or
  ``set:`` keys at OpenSession) always go to Spark: the time zone changes
  how timestamps render. Authorisation has run before any of this.
- **What is answered.** Exactly what Spark's Thrift Server answered for that
  text: a miss runs the statement on a gateway-owned session of the internal
  Spark Thrift Server and keeps its result-set schema (served verbatim) and
  its rows (re-encoded with the Thrift column kinds Spark used), so rows and
  column types are identical by construction. Concurrent misses of one text
  wait for one Spark query.
- **As whom.** That session logs in as the client's user and is bound to the
  client's role (the one its own session was bound to, AuthzCheck.java), so a
  miss runs like any statement of that client: Spark's check of the resolved
  plan as that role (a reader's non-literal regular expression is refused), the
  role's statement timeout (``tierlake.query.reader-timeout``,
  StatementDeadline.java: jobs cancelled, planning stopped) and the client's
  own per-statement timeout. Answers are kept per role: a reader is answered
  only what a reader's run of the text produced (and was allowed to). Sessions
  are pooled per user and role.
- **How fresh.** Each entry records the process's ``sys`` state version
  (:mod:`server.state.state_version`) it was computed at; the version is
  bumped after every commit to a ``sys`` table in this process (the
  coordinator, leases, KV catalog, CTAS journal, quality results: all
  through ``SmallTable``; the tiering service in other processes reaches the
  coordinator through ``CALL sys.*``, which runs here) and whenever a
  statement that is not a query and whose text mentions ``sys`` is relayed
  (an admin's hand-made change; Iceberg's ``CALL spark_catalog.system.…``
  naming a sys table in a string); as the gateway does not see when Spark
  finishes such a statement, nothing is cached for ``max-age`` after it. An
  entry is served only at the version it was computed at, so a status read
  never misses a committed coordinator change. Writers
  this process cannot see (another Spark application writing ``sys``
  tables directly) are bounded by ``tierlake.gateway.status-cache.max-age``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierlake import sql
from tierlake.server.exceptions import PermissionDeniedError, SparkSqlError
from tierlake.server.gateway.transport.backend_client import BackendClient
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo, Statement
from tierlake.server.runtime import operations
from tierlake.server.state import state_version

log = logging.getLogger("tierlake.gateway")

CATALOG = "spark_catalog"
SYS = "sys"
_PLAN = "org.apache.spark.sql.catalyst.plans.logical."
_EXPR = "org.apache.spark.sql.catalyst.expressions."
_ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
# Query plan nodes: nothing here writes, runs a command or reads a file.
QUERY_NODES = frozenset(_PLAN + name for name in (
    "Project", "Filter", "Aggregate", "Sort", "GlobalLimit", "LocalLimit", "Offset", "Join",
    "SubqueryAlias", "UnresolvedWith", "Distinct", "Union", "Intersect", "Except",
    "WithWindowDefinition", "Window", "Deduplicate",
)) | frozenset(_ANALYSIS + name for name in (
    "UnresolvedRelation", "UnresolvedHaving", "UnresolvedSubqueryColumnAliases",
))
# Other nodes of plain queries: answered by Spark, but they change nothing.
OTHER_READ_NODES = frozenset({_PLAN + "OneRowRelation", _PLAN + "UnresolvedHint", _ANALYSIS + "UnresolvedHint",
                              _ANALYSIS + "UnresolvedTableValuedFunction", _ANALYSIS + "UnresolvedInlineTable",
                              _PLAN + "Generate", _ANALYSIS + "UnresolvedGenerator"})
# Unresolved expressions of a query; every other expression must be one of
# catalyst's own (package ``expressions``) and not a non-deterministic one.
UNRESOLVED_EXPRESSIONS = frozenset(_ANALYSIS + name for name in (
    "UnresolvedAttribute", "UnresolvedStar", "UnresolvedAlias", "UnresolvedFunction",
    "UnresolvedExtractValue", "UnresolvedRegex", "UnresolvedOrdinal",
))
NONDETERMINISTIC_EXPRESSIONS = frozenset({
    "Rand", "Randn", "Uuid", "Shuffle", "MonotonicallyIncreasingID", "SparkPartitionID",
    "InputFileName", "InputFileBlockStart", "InputFileBlockLength", "CurrentTimestamp", "Now",
    "CurrentDate", "LocalTimestamp", "CurrentTimeZone", "CurrentUser", "CurrentDatabase",
    "CurrentCatalog", "CallMethodViaReflection", "CurrentBatchTimestamp",
})
# Built-ins whose value depends on the clock, the session or chance.
NONDETERMINISTIC_FUNCTIONS = frozenset({
    "rand", "random", "randn", "uuid", "shuffle", "monotonically_increasing_id", "spark_partition_id",
    "input_file_name", "input_file_block_start", "input_file_block_length", "current_timestamp", "now",
    "current_date", "curdate", "localtimestamp", "current_timezone", "current_user", "user", "session_user",
    "current_database", "current_schema", "current_catalog", "unix_timestamp", "reflect", "java_method",
    "try_reflect", "aes_encrypt", "try_aes_decrypt", "aes_decrypt", "uniform", "randstr",
})
# Bare words Spark resolves to the clock or the session when no column has the name.
NONDETERMINISTIC_WORDS = frozenset({"current_date", "current_timestamp", "current_user", "user",
                                    "session_user", "current_time", "localtimestamp"})
SETTING_NODES = frozenset({"org.apache.spark.sql.execution.command.SetCommand",
                           "org.apache.spark.sql.execution.command.ResetCommand"})
_VIEW_HEADER = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+\S+\s+AS\s+", re.IGNORECASE)


def _parts(text: Any) -> list[str] | None:
    """``"[sys, lake_tiering_status]"`` (a Scala Seq rendered by toJSON) → parts."""
    if not isinstance(text, str) or not (text.startswith("[") and text.endswith("]")):
        return None
    body = text[1:-1]
    return [p.lower() for p in body.split(", ")] if body else []


def changes_results(settings: tuple[str, ...]) -> bool:
    """Whether OpenSession's ``set:`` keys may change a query's answer. Hive
    JDBC sends ``set:hiveconf:hive.server2.thrift.resultset.default.fetch.size``
    on every connection; ``hive.*`` keys are HiveServer2's, not Spark SQL's."""
    return any(not key.split(":", 2)[-1].lower().startswith("hive.") for key in settings)


@dataclass(frozen=True)
class Verdict:
    """What Spark's parse of one statement says about it."""

    kind: str                      # "sys-read", "read" (another query), "settings", "other"
    relations: frozenset[str] = frozenset()  # sys names it reads
    names_sys: bool = False        # any identifier in it names the sys database


def _walk(node: Any, found: dict[str, Any]) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, found)
        return
    if not isinstance(node, dict):
        if isinstance(node, str) and node.startswith("["):
            parts = _parts(node)
            if parts and (parts[0] == SYS or parts[:2] == [CATALOG, SYS]):
                found["names_sys"] = True
        return
    cls = node.get("class")
    if cls is not None:
        found["classes"].add(cls)
        short = cls.rsplit(".", 1)[-1]
        if cls == _ANALYSIS + "UnresolvedRelation":
            found["relations"].append(_parts(node.get("multipartIdentifier")))
        elif cls == _ANALYSIS + "UnresolvedFunction":
            parts = _parts(node.get("nameParts"))
            if parts == ["unix_timestamp"] and node.get("arguments"):
                parts = ["unix_timestamp(x)"]  # of an argument, not of the clock
            found["functions"].append(parts)
        elif cls == _ANALYSIS + "UnresolvedAttribute":
            parts = _parts(node.get("nameParts"))
            if parts and len(parts) == 1 and parts[0] in NONDETERMINISTIC_WORDS:
                found["nondeterministic"] = True
        elif short in NONDETERMINISTIC_EXPRESSIONS:
            found["nondeterministic"] = True
    if node.get("product-class") == "scala.Tuple2" and isinstance(node.get("_1"), str):
        found["ctes"].add(node["_1"].lower())  # UnresolvedWith's (name, plan) pairs
    for value in node.values():
        if isinstance(value, (list, dict, str)):
            _walk(value, found)


def classify(plan_json: str, builtins: frozenset[str], cacheable: Callable[[str], bool]) -> Verdict:
    """Classify Spark's unresolved plan (``LogicalPlan.toJSON``).

    ``builtins``: Spark's built-in function names; ``cacheable(name)``: whether
    ``sys.<name>`` is a table or a view whose definition is a deterministic
    read of sys tables.
    """
    found: dict[str, Any] = {"classes": set(), "relations": [], "functions": [], "ctes": set(),
                             "nondeterministic": False, "names_sys": False}
    _walk(json.loads(plan_json), found)
    names_sys = found["names_sys"]
    classes = found["classes"]
    if classes & SETTING_NODES:
        return Verdict("settings", names_sys=names_sys)
    plan_classes = {c for c in classes if c.startswith(_PLAN) or c.startswith(_ANALYSIS)} - UNRESOLVED_EXPRESSIONS
    if not plan_classes or not plan_classes <= QUERY_NODES | OTHER_READ_NODES:
        return Verdict("other", names_sys=names_sys)
    if not plan_classes <= QUERY_NODES:
        return Verdict("read", names_sys=names_sys)
    other_classes = classes - plan_classes - UNRESOLVED_EXPRESSIONS
    if any(not c.startswith(_EXPR) for c in other_classes):
        return Verdict("read", names_sys=names_sys)
    sys_names = set()
    for parts in found["relations"]:
        if parts is None:
            return Verdict("read", names_sys=names_sys)
        if len(parts) == 1 and parts[0] in found["ctes"]:
            continue
        if len(parts) == 3 and parts[0] == CATALOG:
            parts = parts[1:]
        if len(parts) != 2 or parts[0] != SYS or not cacheable(parts[1]):
            return Verdict("read", names_sys=names_sys)
        sys_names.add(parts[1])
    deterministic = not found["nondeterministic"] and all(
        f == ["unix_timestamp(x)"]
        or (f is not None and len(f) == 1 and f[0] in builtins and f[0] not in NONDETERMINISTIC_FUNCTIONS)
        for f in found["functions"])
    if not sys_names or not deterministic:
        return Verdict("read", names_sys=names_sys)
    return Verdict("sys-read", frozenset(sys_names), names_sys)


_READ_NODES = QUERY_NODES | OTHER_READ_NODES


def quick_verdict(plan: Any) -> Verdict | None:
    """``read`` when the authoriser's parse (a planauth.Plan: every plan node,
    and the relations' names) already shows a query that reads a table
    outside sys; None when the full classification must decide. A query
    of a million characters that mentions sys is then not turned into JSON
    and walked in Python."""
    for node in plan.nodes.values():
        if node.kind == "P" and node.cls not in _READ_NODES:
            return None
    for node in plan.nodes.values():
        if node.name == "UnresolvedRelation" and node.seqs:
            parts = [p.lower() for p in node.seqs[0]]
            if len(parts) == 3 and parts[0] == CATALOG:
                parts = parts[1:]
            if len(parts) >= 2 and parts[0] != SYS:  # one part may name a CTE: left to classify
                return Verdict("read")
    return None


@dataclass
class CachedResult(LocalResult):
    """A Spark Thrift Server result kept by the gateway: ``schema`` is the
    TTableSchema Spark sent (served as is), ``columns`` the Thrift column
    kinds Spark used for the rows, so re-encoding gives the same values."""

    schema: Any = None


@dataclass
class _Entry:
    version: int
    created: float
    result: CachedResult


class SysReads:
    """Route ``sys-read``: cacheable ``sys`` reads; see the module docstring."""

    POOL = 8  # idle gateway-owned Spark sessions kept, over all users
    name = "sys-read"
    role = None
    what = "a read of sys"

    def __init__(self, spark: Callable[[], Any], backend: Callable[[], tuple[str, int, str | None]],
                 max_age_s: float = 10.0, enabled: bool = True, max_entries: int = 256,
                 max_rows: int = 100_000, sessions: Callable[[], Any] | None = None):
        self._spark = spark
        self._backend = backend
        self._sessions = sessions  # the authoriser's SparkSessions: binds a backend session to a role
        self.max_age_s = max_age_s
        self.enabled = enabled
        self.max_entries = max_entries
        self.max_rows = max_rows
        self._verdicts: OrderedDict[str, Verdict] = OrderedDict()
        self._entries: OrderedDict[tuple[str | None, str], _Entry] = OrderedDict()  # (role, text)
        self._filling: dict[tuple[str | None, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._builtins: frozenset[str] | None = None
        self._views: dict[str, bool] | None = None
        self._pool: list[tuple[tuple[str | None, str | None], Any]] = []  # ((user, role), client), oldest first
        self.settings_sessions: set[bytes] = set()
        self.hits = 0
        self.misses = 0
        self._uncached_until = 0.0

    # -- the route ------------------------------------------------------------
    def claim(self, statement: Statement) -> bool:
        """A cacheable sys read (asked after the CALL and DDL routes: their sys commits bump the version
        themselves). Also notes sessions that changed a setting, and statements that may change sys."""
        session = statement.session
        lowered = statement.text.lower()
        if "sys" in lowered:
            state_version.settle()  # the round history is written behind the state: read your writes
        if not self.enabled or "sys" not in lowered:
            # Cannot read or name sys: only a SET/RESET matters (Spark's parse decides; "set" is a cheap superset).
            if self.enabled and "set" in lowered and self.verdict(statement).kind == "settings":
                self.settings_sessions.add(session.session_guid)
            return False
        verdict = self.verdict(statement)
        if verdict.kind == "settings":
            self.settings_sessions.add(session.session_guid)
        if verdict.kind == "other":
            # Not a query and its text mentions sys (an admin's change, or Iceberg's CALL
            # spark_catalog.system.rollback_to_snapshot('sys.…', …) naming a table in a string):
            # whatever it changes, cached answers are not reused after it. The gateway does not see
            # when Spark finishes it, so answers computed meanwhile are not kept for max-age either.
            state_version.bump()
            self._uncached_until = time.monotonic() + self.max_age_s
        return (verdict.kind == "sys-read" and not changes_results(session.settings)
                and session.session_guid not in self.settings_sessions)

    def execute(self, statement: Statement) -> LocalResult:
        return self.read(statement.text, statement.session)

    def session_closed(self, guid: bytes) -> None:
        self.settings_sessions.discard(guid)

    # -- classification -------------------------------------------------------
    def verdict(self, statement: Statement) -> Verdict:
        text = statement.text
        quick = quick_verdict(statement.plan) if statement.plan is not None else None
        if quick is not None:
            return quick
        with self._lock:
            cached = self._verdicts.get(text)
            if cached is not None:
                self._verdicts.move_to_end(text)
                return cached
        verdict = self._classify(statement)
        with self._lock:
            self._verdicts[text] = verdict
            while len(self._verdicts) > 4 * self.max_entries:
                self._verdicts.popitem(last=False)
        return verdict

    def _parse_json(self, text: str) -> str | None:
        try:
            spark = self._spark()
            # As the session runs it: ${…} stays literal (PlanWalker.parse).
            walker = spark.sparkContext._jvm.io.tierlake.internal.PlanWalker
            return str(walker.parse(spark._jsparkSession, text).toJSON())
        except Exception as e:  # noqa: BLE001 - Spark will answer the statement with its own error
            log.debug("not a sys read (%s): %r", type(e).__name__, text[:200])
            return None

    def _classify(self, statement: Statement) -> Verdict:
        plan = self._plan_json(statement)
        if plan is None:
            return Verdict("other")
        self._load_catalog()
        return classify(plan, self._builtins, self._cacheable)

    def _plan_json(self, statement: Statement) -> str | None:
        """The statement's one parse as JSON; None when it does not parse (relayed: Spark answers it)."""
        plan = statement.parsed()
        if plan is None or plan.java is None:
            return None
        try:
            return str(plan.java.toJSON())
        except Exception as e:  # noqa: BLE001 - relayed: Spark answers it
            log.debug("not a sys read (%s): %r", type(e).__name__, statement.text[:200])
            return None

    def _cacheable(self, name: str) -> bool:
        return self._views.get(name, True)  # not a view of ours: a sys table, changed through SmallTable

    def _load_catalog(self) -> None:
        """Spark's built-in function names, and which sys views are deterministic sys reads."""
        if self._views is not None:
            return
        spark = self._spark()
        builtins = frozenset(str(r[0]).lower() for r in spark.sql("SHOW SYSTEM FUNCTIONS").collect())
        self._builtins = builtins
        views: dict[str, bool] = {}
        for path in sql.files("views"):
            for statement in sql.split_statements(path.read_text(encoding="utf-8")):
                body = "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--"))
                query = _VIEW_HEADER.sub("", body, count=1)
                plan = self._parse_json(query) if query != body else None
                views[path.stem] = False  # until proven a deterministic sys read
                if plan is not None:
                    # A view over a non-cacheable view is not cacheable (views are listed in name order:
                    # judge with what is known, unknown names count as tables).
                    ok = classify(plan, builtins, lambda n: views.get(n, True)).kind == "sys-read"
                    views[path.stem] = ok
        for path in sql.files("views", ".sql.j2"):
            # Rendered views (sys.lake_tiering_health) are always Spark's: unparsed here, and it reads the clock.
            views[path.name.removesuffix(".sql.j2")] = False
        self._views = views
        log.info("sys views answered from the gateway's cache: %s; always by Spark: %s",
                 ", ".join(sorted(n for n, ok in views.items() if ok)) or "none",
                 ", ".join(sorted(n for n, ok in views.items() if not ok)) or "none")

    # -- the cache --------------------------------------------------------------
    def _fresh(self, key: tuple[str | None, str], version: int) -> CachedResult | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.version != version or time.monotonic() - entry.created > self.max_age_s:
                return None
            self._entries.move_to_end(key)
            return entry.result

    def read(self, statement: str, session: SessionInfo | None = None) -> CachedResult:
        """The result of ``statement`` for ``session``'s role: from the cache when the sys state is
        unchanged since a run as that role computed it, else from Spark (one query per text and role),
        run as the session's user and role."""
        if time.monotonic() < self._uncached_until:
            self.misses += 1
            return self._run(statement, session)  # a relayed write of sys may still be running
        key = (getattr(session, "role", None), statement)
        result = self._fresh(key, state_version.current())
        if result is not None:
            self.hits += 1
            return result
        with self._lock:
            gate = self._filling.setdefault(key, threading.Lock())
        with gate:
            version = state_version.current()  # before the query: a later commit makes it stale
            started = time.monotonic()
            result = self._fresh(key, version)
            if result is not None:
                self.hits += 1
                return result
            self.misses += 1
            result = self._run(statement, session)
            if len(result.rows) <= self.max_rows:
                with self._lock:
                    self._entries[key] = _Entry(version, started, result)
                    self._entries.move_to_end(key)
                    while len(self._entries) > self.max_entries:
                        self._entries.popitem(last=False)
            return result

    def _run(self, statement: str, session: SessionInfo | None = None) -> CachedResult:
        """Run ``statement`` on a gateway-owned Spark session as ``session``'s user and role."""
        role = getattr(session, "role", None)
        user = getattr(session, "user", None) if role is not None else None
        who = (user, role)
        with self._lock:
            found = next((i for i in range(len(self._pool) - 1, -1, -1) if self._pool[i][0] == who), None)
            client = self._pool.pop(found)[1] if found is not None else None
        if client is None:
            host, port, secret = self._backend()
            client = BackendClient(host, port, secret, user=user)
            if role is not None:
                try:
                    self._bind(client, role, user)
                except Exception:
                    client.close()
                    raise
        control = operations.current()
        try:
            schema, columns, rows = client.run(statement, control.timeout_s if control is not None else 0, control)
        except SparkSqlError:
            self._release(who, client)
            raise
        except Exception:
            client.close()
            raise
        self._release(who, client)
        return CachedResult(columns, rows, schema)

    def _bind(self, client: BackendClient, role: str, user: str | None) -> None:
        """Have Spark check what ``client``'s session runs as ``role`` (``user``'s), as the client's own."""
        sessions = self._sessions() if self._sessions is not None else None
        if sessions is None:
            raise PermissionDeniedError("permission denied: the statement could not be checked "
                                        "(the gateway cannot bind its Spark session to a role)")
        handle = client.session.sessionId
        sessions.bind_role(handle.guid, handle.secret, role, user)

    def _release(self, who: tuple[str | None, str | None], client: Any) -> None:
        with self._lock:
            self._pool.append((who, client))
            if len(self._pool) <= self.POOL:
                return
            _, client = self._pool.pop(0)  # the least recently used
        client.close()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
        for _, client in pool:
            client.close()
