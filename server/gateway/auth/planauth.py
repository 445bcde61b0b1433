"""Authorisation on Spark's own parse of a statement (docs/design.md, 'Security model').

The gateway never decides on the text. It asks the session's parser (the
very ``sqlParser`` the Spark Thrift Server runs the statement through) for
the unresolved logical plan, flattens it in the JVM
(``io.tierlake.internal.PlanWalker``: every node, expression and field,
including subqueries, CTE definitions, INSERT targets and EXPLAIN'd plans)
and checks the result against allow-lists. Deny by default: a plan node,
function, relation or setting not listed needs ``admin``; a few things are
refused to everyone (turning variable substitution back on).

The lists are the policy's (``policy.json`` beside this module, read here at
import and by Spark's check rule, AuthzCheck.java, through
``authz.configure_policy``): one declaration for both lines. Session settings
(``READER_SETTINGS``, checked by value) are this line's only.

API (also used by other gateway modules):

- :func:`parse_plan(jsession, text, max_nodes)` → :class:`Plan` (raises
  :class:`SqlSyntaxError` with Spark's parse error);
- :func:`requirement(plan, current_db)` → :class:`Requirement` (the least
  role that may run it; role ``None`` = nobody);
- :func:`authorise(plan, roles, current_db)` → :class:`Decision`.

The parse made here is kept on the gateway's statement object
(``transport.protocol.Statement``): the handlers that decide next what the
gateway answers itself read it (no second parser, no second parse).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlake.server.catalog.properties import WRITE_REQUEST_ID
from tierlake.server.exceptions import PermissionDeniedError, SqlSyntaxError, StatementTooComplexError
from tierlake.server.runtime import jvm_errors
from tierlake.server.sqlapi import roles as R

SESSION_CATALOG = "spark_catalog"
MAX_PLAN_NODES = 1_000_000
ROUTING_PLAN_NODES = 10_000  # a parse only routed on (development mode): beyond this, its root alone
NOBODY = None  # Requirement.role for what no role may do

# The policy, declared once for both lines of authorisation (this module and AuthzCheck.java).
POLICY_PATH = Path(__file__).with_name("policy.json")
POLICY: dict[str, Any] = json.loads(POLICY_PATH.read_text(encoding="utf-8"))
POLICY_ROLES = {R.READER: R.READER, R.WRITER: R.WRITER, R.ADMIN: R.ADMIN, "nobody": NOBODY}


def policy_entry(entry_id: str) -> dict[str, Any]:
    """The policy entry ``entry_id`` (KeyError when the policy has none)."""
    for entry in POLICY["entries"]:
        if entry["id"] == entry_id:
            return entry
    raise KeyError(entry_id)


def policy_text() -> str:
    """The policy file's text, as AuthzCheck.configure reads it."""
    return POLICY_PATH.read_text(encoding="utf-8")


SYS_DATABASE = policy_entry("writes-into-sys")["database"]
# Query plan nodes (and read-only commands) a reader may run.
READER_NODES = frozenset(policy_entry("reader-statements")["nodes"])
# Row changes a writer may make (into catalog tables outside sys).
WRITE_NODES = frozenset(policy_entry("writes")["nodes"])
WRITE_VERBS: dict[str, str] = dict(policy_entry("writes")["verbs"])
# Data sources Spark reads by path when named as a relation's namespace
# (``csv.`/path```); class names (with a dot) are refused as well.
DATA_SOURCES = frozenset(policy_entry("files-by-path")["names"])
# Iceberg's metadata tables (``db.table.snapshots``): readable like tables.
ICEBERG_METADATA_TABLES = frozenset(policy_entry("iceberg-metadata-tables")["names"])
# Functions that call arbitrary Java methods in the server's JVM.
JVM_FUNCTIONS = frozenset(policy_entry("jvm-reflection")["names"])
# XML functions: Spark's XPath reader resolves external entities and DTDs, so a document names
# URLs the server fetches. Nothing Spark fetches is a client's to choose: refused to every role.
FETCHING_FUNCTIONS = frozenset(policy_entry("xml-functions")["names"])
TABLE_FUNCTIONS = frozenset(policy_entry("table-functions")["names"])
# Function entries the parse can decide by name, those refused to everyone first (before a
# qualified name's admin): (SQL names, least role, what the refusal calls it).
_NAMED_FUNCTIONS = sorted(
    ((frozenset(e["names"]), POLICY_ROLES[e["role"]], e.get("parsed", "{name}"))
     for e in POLICY["entries"]
     if e["kind"] == "function" and e["names"] and e["decided_by"] != "resolved" and e["role"] != R.READER),
    key=lambda rule: rule[1] is not NOBODY)


def _is_bool(value: str) -> bool:
    return value.strip().lower() in ("true", "false")


def _is_int(low: int, high: int) -> Any:
    def check(value: str) -> bool:
        text = value.strip()
        return text.lstrip("-").isascii() and text.lstrip("-").isdigit() and len(text) < 12 and low <= int(text) <= high
    return check


_SIZE = re.compile(r"(-?[0-9]{1,12})\s*(b|k|kb|m|mb|g|gb)?", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}


def _is_size(low: int, high: int) -> Any:
    """A byte size as Spark reads it (``10MB``, ``1048576``); ``-1`` (off) passes when ``low`` is -1."""
    def check(value: str) -> bool:
        found = _SIZE.fullmatch(value.strip())
        if not found:
            return False
        size = int(found.group(1)) * _SIZE_UNITS[(found.group(2) or "").lower() or None]
        return low <= size <= high
    return check


def _is_one_of(*names: str) -> Any:
    return lambda value: value.strip().upper() in names


# A region id (Europe/Paris), an offset (+08:00) or an abbreviation, as SET TIME ZONE passes them.
_ZONE = re.compile(r"'?[A-Za-z0-9_+\-:/]{1,64}'?")


def _is_zone(value: str) -> bool:
    return bool(_ZONE.fullmatch(value.strip()))


_MB = 1 << 20
# Session settings a reader may change with SET / RESET (and OpenSession, confOverlay): keys (any
# case, ASCII only) and the values each may take. Bounds keep a reader's session from asking the
# server for more than a query's share (a 2 GB broadcast, a million shuffle partitions).
READER_SETTINGS: dict[str, Any] = {
    "spark.sql.session.timezone": _is_zone,
    "spark.sql.shuffle.partitions": _is_int(1, 2000),
    "spark.sql.ansi.enabled": _is_bool,
    "spark.sql.adaptive.enabled": _is_bool,
    "spark.sql.adaptive.coalescepartitions.enabled": _is_bool,
    "spark.sql.adaptive.skewjoin.enabled": _is_bool,
    "spark.sql.adaptive.advisorypartitionsizeinbytes": _is_size(_MB, 1024 * _MB),
    "spark.sql.autobroadcastjointhreshold": _is_size(-1, 64 * _MB),
    "spark.sql.casesensitive": _is_bool,
    "spark.sql.crossjoin.enabled": _is_bool,
    "spark.sql.cbo.enabled": _is_bool,
    "spark.sql.cbo.joinreorder.enabled": _is_bool,
    "spark.sql.join.prefersortmergejoin": _is_bool,
    "spark.sql.optimizer.dynamicpartitionpruning.enabled": _is_bool,
    "spark.sql.codegen.wholestage": _is_bool,
    "spark.sql.parquet.filterpushdown": _is_bool,
    "spark.sql.parquet.enablevectorizedreader": _is_bool,
    "spark.sql.decimaloperations.allowprecisionloss": _is_bool,
    "spark.sql.legacy.timeparserpolicy": _is_one_of("EXCEPTION", "CORRECTED", "LEGACY"),
    "spark.sql.timestamptype": _is_one_of("TIMESTAMP_LTZ", "TIMESTAMP_NTZ"),
    "spark.sql.mapkeydeduppolicy": _is_one_of("EXCEPTION", "LAST_WIN"),
    "spark.sql.datetime.java8api.enabled": _is_bool,
    "spark.sql.thriftserver.incrementalcollect": _is_bool,
    "spark.sql.files.maxpartitionbytes": _is_size(_MB, 1024 * _MB),
    "spark.sql.files.opencostinbytes": _is_size(0, 1024 * _MB),
    "spark.sql.execution.arrow.pyspark.enabled": _is_bool,
    "spark.sql.storeassignmentpolicy": _is_one_of("ANSI", "LEGACY", "STRICT"),
    "spark.sql.iceberg.vectorization.enabled": _is_bool,
    "spark.sql.result.rows.limit": _is_int(0, 10_000_000),
}
# Client-supplied values are never expanded: with Hive's session set-up (OpenSession) and with
# Spark's substitution, ${env:…}, ${system:…} and ${hiveconf:…} would read the server's
# environment, JVM properties and configured secrets.
SUBSTITUTION = "${"


def substitution_refused(where: str) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"permission denied: '${{' in {where}: tierlake never expands ${{…}} in values a client sends "
        "(it would read the server's environment and settings)")


def reader_may_set(key: str, value: str | None) -> bool:
    """Whether any reader may set session setting ``key`` to ``value`` (None: reset it)."""
    check = READER_SETTINGS.get(key.strip().lower()) if key.isascii() else None
    if check is None:
        return False
    return value is None or (len(value) <= 256 and SUBSTITUTION not in value and check(value))


# Session settings a writer may change: the request id of its next write to a
# stream table (server/ingest/writer.py).
WRITER_SETTINGS = frozenset({WRITE_REQUEST_ID})
# Every other SET or RESET of a tierlake.* key is answered by the gateway itself with an error (unknown
# setting, did you mean …; routing/ingest.py): it never reaches Spark's conf, so any role may send it.
TIERLAKE_PREFIX = "tierlake."
# Never changed by anyone: Spark would substitute ${…} in statement text
# after the gateway authorised it.
FORBIDDEN_SETTINGS = frozenset(policy_entry("forbidden-settings")["names"])
EXPRESSION_PACKAGES = ("org.apache.spark.sql.catalyst.expressions.", "org.apache.spark.sql.catalyst.analysis.")
# MERGE/UPDATE clauses: expressions declared among the plan nodes.
MERGE_EXPRESSIONS = frozenset({"Assignment", "DeleteAction", "UpdateAction", "InsertAction", "UpdateStarAction",
                               "InsertStarAction"})
# Expressions whose content the walker cannot see (IDENTIFIER(…) builds
# the real expression later, from a Scala function).
OPAQUE_EXPRESSIONS = frozenset({"ExpressionWithUnresolvedIdentifier"})


@dataclass
class Node:
    id: int
    parent: int
    kind: str  # P plan, E expression, O other
    cls: str  # fully qualified
    strings: list[str] = field(default_factory=list)
    seqs: list[list[str]] = field(default_factory=list)
    children: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        # A Scala object's class ends in "$" (ClearCacheCommand$): its name is the part before.
        return self.cls.rstrip("$").rsplit(".", 1)[-1].rsplit("$", 1)[-1]


@dataclass
class Plan:
    """A flattened unresolved plan: nodes by id, 0 is the root."""

    nodes: dict[int, Node]
    # Spark's parsed plan itself (a py4j proxy): the INSERT path analyses the
    # very plan that was authorised instead of parsing the text again.
    java: Any = field(default=None, compare=False, repr=False)

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def names(self) -> set[str]:
        return {n.name for n in self.nodes.values()}


@dataclass(frozen=True)
class Requirement:
    role: str | None  # None: refused to every role
    what: str  # how the statement is named in the error message


@dataclass(frozen=True)
class Decision:
    allowed: bool
    requirement: Requirement


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append({"t": "\t", "n": "\n", "r": "\r"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def decode(description: str) -> Plan:
    """:class:`Plan` from PlanWalker's lines."""
    nodes: dict[int, Node] = {}
    for line in description.split("\n"):
        if not line:
            continue
        parts = line.split("\t")
        tag = parts[0]
        if tag == "N":
            node = Node(int(parts[1]), int(parts[2]), parts[3], parts[4])
            nodes[node.id] = node
            if node.parent in nodes:
                nodes[node.parent].children.append(node.id)
        elif tag == "S":
            nodes[int(parts[1])].strings.append(_unescape(parts[2] if len(parts) > 2 else ""))
        elif tag == "Q":
            nodes[int(parts[1])].seqs.append([_unescape(p) for p in parts[2:]])
    if 0 not in nodes:
        raise SqlSyntaxError("the statement has no plan")
    return Plan(nodes)


def _out_of_stack(exc: Exception) -> bool:
    """A Java StackOverflowError (a statement too deep for Spark's recursive
    parser or for the walk of its plan), by class, not by message."""
    found = jvm_errors.failure(exc)
    return found is not None and found.has_class("java.lang.StackOverflowError")


def _too_complex() -> StatementTooComplexError:
    return StatementTooComplexError("statement too complex: Spark's parser ran out of stack on its nesting "
                                    "(split the statement, or use WITH for nested subqueries)")


def parse_plan(jsession: Any, text: str, max_nodes: int = MAX_PLAN_NODES, whole: bool = True) -> Plan:
    """Spark's parse of ``text`` in ``jsession`` (a Java SparkSession), flattened.

    Raises :class:`SqlSyntaxError` with Spark's own message when it does not
    parse (nothing runs then). ``whole=False``: a plan of more than ``max_nodes``
    nodes is described by its root alone (routing needs no more: a parse that
    authorises nothing, in development mode)."""
    from py4j.protocol import Py4JJavaError
    from pyspark import SparkContext
    from pyspark.errors.exceptions.captured import CapturedException, ParseException

    try:
        jplan = SparkContext._jvm.io.tierlake.internal.PlanWalker.parse(jsession, text)
    except ParseException as exc:
        raise SqlSyntaxError(str(exc).strip()) from None
    except (CapturedException, Py4JJavaError) as exc:
        if _out_of_stack(exc):
            raise _too_complex() from None
        found = jvm_errors.failure(exc)
        if (found is not None and found.has_class("ParseException")) or "ParseException" in type(exc).__name__:
            raise SqlSyntaxError(str(exc).strip()) from None
        raise
    try:
        plan = decode(SparkContext._jvm.io.tierlake.internal.PlanWalker.describe(jplan, max_nodes))
    except (CapturedException, Py4JJavaError) as exc:
        if _out_of_stack(exc):
            raise _too_complex() from None
        if not whole:
            plan = Plan({0: Node(0, -1, "P", str(jplan.getClass().getName()))})
        else:
            raise PermissionDeniedError(f"permission denied: the statement's plan cannot be checked ({exc})") from None
    plan.java = jplan
    return plan


def function_names(jsession: Any) -> frozenset[str]:
    """Every function name the session knows (built-ins and its UDFs)."""
    from pyspark import SparkContext

    names = SparkContext._jvm.io.tierlake.internal.PlanWalker.functionNames(jsession)
    return frozenset(n.lower() for n in names.split("\n") if n)


# -- rules ----------------------------------------------------------------

_ORDER = {R.READER: 0, R.WRITER: 1, R.ADMIN: 2, NOBODY: 3}


def _max(a: Requirement, b: Requirement) -> Requirement:
    return b if _ORDER[b.role] > _ORDER[a.role] else a


def _identifier(node: Node) -> list[str]:
    return node.seqs[0] if node.seqs else []


def folded_data_source(name: str) -> bool:
    """Whether ``name`` is a data source name as Spark compares short names (without a JVM to ask)."""
    return java_fold(name) in DATA_SOURCES or "." in name


def _table_database(parts: list[str], current_db: str, data_source: Any = folded_data_source) -> str | None:
    """The database of a catalog table named ``parts``; None when the name is not a table of the
    session catalog: files read by path (``csv.`/p```: Spark reads a two-part name whose first part
    is a data source as files), or another catalog. ``data_source(name)``: whether Spark resolves
    ``name`` as a data source (Spark's own lookup when the gateway has a JVM)."""
    # Path-like parts never name a table here (Iceberg reads some as paths); a dot may (`a.b`).
    if not parts or any(not p or "/" in p or "\\" in p or ":" in p for p in parts):
        return None
    lowered = [p.lower() for p in parts]
    if java_fold(lowered[0]) == SESSION_CATALOG and len(lowered) >= 3:
        # A three-part name in the session catalog is never read as files.
        lowered, parts = lowered[1:], parts[1:]
        if len(lowered) == 2:
            return lowered[0]
    if len(lowered) == 1:
        return current_db
    if len(lowered) == 2:
        return None if data_source(parts[0]) else lowered[0]
    if len(lowered) == 3 and not data_source(parts[0]):
        last = java_fold(lowered[2])
        if last in ICEBERG_METADATA_TABLES or last.startswith(("branch_", "tag_")):
            return lowered[0]
    return None


def _relation_refusal(parts: list[str], data_source: Any) -> str:
    name = ".".join(parts)
    if len(parts) == 2 and data_source(parts[0]):
        return f"a query of {name} (reads files by path through the data source {parts[0]!r})"
    if any("/" in p or "\\" in p or ":" in p for p in parts):
        return f"a query of {name} (a path, not a table name)"
    return f"a query of {name} (another catalog, or not a table of the session catalog)"


def _setting(node: Node) -> tuple[str | None, str | None]:
    key = node.strings[0].strip().lower() if node.strings else None
    value = node.strings[1] if len(node.strings) > 1 else None
    return key, value


def setting_of(node: Node) -> tuple[str | None, str | None]:
    """A SetCommand's or ResetCommand's key (lower-cased; None: all) and value (None: none given)."""
    return _setting(node)


def setting_requirement(key: str | None, value: str | None) -> Requirement:
    """Who may set session setting ``key`` to ``value`` (key None: show settings; value None: show one)."""
    if SUBSTITUTION in (key or "") or SUBSTITUTION in (value or ""):
        return Requirement(NOBODY, "SET with '${' in it (tierlake never expands ${…})")
    if key == "-v":
        # Every setting Spark defines, with values SET -v does not redact (the warehouse path).
        return Requirement(R.ADMIN, "SET -v (every setting, unredacted)")
    if key is None or (value is None and not key.startswith("-")):
        return Requirement(R.READER, "SET")  # shows settings (Spark redacts hosts, ports, paths), changes nothing
    if key in FORBIDDEN_SETTINGS:
        return Requirement(NOBODY, f"SET {key} (variable substitution stays off)")
    if reader_may_set(key, value):
        return Requirement(R.READER, "SET")
    if key in WRITER_SETTINGS:
        return Requirement(R.WRITER, f"SET {key}")
    if key.startswith(TIERLAKE_PREFIX):
        return Requirement(R.READER, "SET")  # refused by the gateway with its reason (routing/ingest.py)
    if key.isascii() and key in READER_SETTINGS:
        return Requirement(R.ADMIN, f"SET {key} to {value[:40]!r} (beyond what a reader may set it to)")
    return Requirement(R.ADMIN, f"SET {key}")


def _write_target(plan: Plan, node: Node) -> Node | None:
    target = plan.nodes[node.children[0]] if node.children else None
    while target is not None and target.name == "SubqueryAlias" and target.children:
        target = plan.nodes[target.children[0]]
    return target


def java_fold(text: str) -> str:
    """``text`` as Java's ``equalsIgnoreCase`` compares it (per char: upper-cased, then lower-cased),
    so look-alikes Spark treats as equal compare equal here: "\u017f" (long s) is "s", "\u0131"
    (dotless i) is "i", "\u212a" (Kelvin) is "k"."""
    out = []
    for c in text:
        upper = c.upper()
        upper = upper if len(upper) == 1 else c
        # Java's simple mappings are one char: Python's full ones may add marks ("\u0130" -> "i\u0307").
        out.append(upper.lower()[0] if upper.lower() else upper)
    return "".join(out)


def _function_requirement(parts: list[str], builtins: frozenset[str]) -> Requirement:
    parts = [p.lower() for p in parts]
    fname = parts[-1] if parts else ""
    folded = java_fold(fname)
    for names, role, what in _NAMED_FUNCTIONS:
        if role is not NOBODY:
            break
        if folded in names or fname in names:
            return Requirement(NOBODY, what.format(name=fname))
    if len(parts) != 1:
        return Requirement(R.ADMIN, f"the function {'.'.join(parts)}")
    for names, role, what in _NAMED_FUNCTIONS:
        if role is not NOBODY and (fname in names or folded in names):
            return Requirement(role, what.format(name=fname))
    if fname not in builtins:
        return Requirement(R.ADMIN, _NOT_BUILT_IN.format(name=fname))
    return Requirement(R.READER, "SELECT")


_NOT_BUILT_IN = policy_entry("persistent-functions")["parsed"]


def _node_requirement(plan: Plan, node: Node, current_db: str, builtins: frozenset[str],
                      data_source: Any = folded_data_source) -> Requirement:
    name = node.name
    if node.kind == "E":
        if name == "UnresolvedFunction":
            return _function_requirement(_identifier(node), builtins)
        if name == "UnresolvedGenerator":
            # name: FunctionIdentifier(funcName, database, catalog), flattened
            return _function_requirement(list(reversed(node.strings)), builtins)
        if name in OPAQUE_EXPRESSIONS:
            return Requirement(R.ADMIN, "IDENTIFIER(…)")
        if node.cls.startswith(EXPRESSION_PACKAGES) or name in MERGE_EXPRESSIONS:
            return Requirement(R.READER, "SELECT")
        return Requirement(R.ADMIN, name)
    if node.kind != "P":
        return Requirement(R.ADMIN, name)
    if name == "UnresolvedRelation":
        parts = _identifier(node)
        if _table_database(parts, current_db, data_source) is None:
            return Requirement(R.ADMIN, _relation_refusal(parts, data_source))
        return Requirement(R.READER, "SELECT")
    if name == "CreateViewCommand" and "view-type:LocalTempView" in node.strings:
        # A session's own temporary view: its query is checked node by node like any other.
        return Requirement(R.READER, "CREATE TEMPORARY VIEW")
    if name == "UnresolvedTableValuedFunction":
        parts = [p.lower() for p in _identifier(node)]
        if len(parts) == 1 and parts[0] in TABLE_FUNCTIONS:
            return Requirement(R.READER, "SELECT")
        return Requirement(R.ADMIN, f"the table function {'.'.join(parts)}")
    if name == "SetCommand":
        return setting_requirement(*_setting(node))
    if name == "ResetCommand":
        key, _ = _setting(node)
        if key in FORBIDDEN_SETTINGS:
            return Requirement(NOBODY, f"RESET {key}")
        answered = key is not None and key.startswith(TIERLAKE_PREFIX)  # by the gateway (routing/ingest.py)
        return Requirement(R.READER if key is None or key in READER_SETTINGS or answered else R.ADMIN, "RESET")
    if name in WRITE_NODES:
        verb = WRITE_VERBS[name]
        target = _write_target(plan, node)
        if target is None or target.name != "UnresolvedRelation":
            return Requirement(R.ADMIN, f"{verb} into {target.name if target else 'this target'}")
        database = _table_database(_identifier(target), current_db, data_source)
        if database is None:
            return Requirement(R.ADMIN, f"{verb} into {'.'.join(_identifier(target))}")
        if database == SYS_DATABASE:
            return Requirement(R.ADMIN, _SYS_WRITE.format(verb=verb))
        return Requirement(R.WRITER, verb)
    if name in READER_NODES:
        return Requirement(R.READER, _what(plan.root))
    return Requirement(R.ADMIN, _what(plan.root))


_SYS_WRITE = policy_entry("writes-into-sys")["parsed"]
_WHAT = {"SetCatalogAndNamespace": "USE", "ExplainCommand": "EXPLAIN", **WRITE_VERBS,
         "InsertIntoDir": "INSERT OVERWRITE DIRECTORY",
         **{node: policy_entry("script-transforms")["parsed"] for node in policy_entry("script-transforms")["nodes"]},
         "AddJarsCommand": "ADD JAR", "AddFilesCommand": "ADD FILE", "AddArchivesCommand": "ADD ARCHIVE",
         "CreateFunction": "CREATE FUNCTION", "CreateFunctionCommand": "CREATE FUNCTION"}


_QUERY_ROOTS = frozenset({"Project", "Sort", "GlobalLimit", "Union", "Aggregate", "Filter", "Distinct",
                          "UnresolvedWith", "Intersect", "Except", "UnresolvedInlineTable", "UnresolvedHint"})


def _what(root: Node) -> str:
    if root.name in _WHAT:
        return _WHAT[root.name]
    if root.name in _QUERY_ROOTS:
        return "SELECT"
    # ShowTables -> SHOW TABLES, DropTable -> DROP TABLE (class names, not client text)
    words, word = [], ""
    for ch in root.name.removesuffix("Command"):
        if ch.isupper() and word:
            words.append(word)
            word = ""
        word += ch
    return " ".join(words + [word]).upper()


def requirement(plan: Plan, current_db: str | None, builtins: frozenset[str] = frozenset(),
                data_source: Any = None) -> Requirement:
    """The least role that may run ``plan`` with ``current_db`` as the
    session's current database (for unqualified names). ``builtins``: the
    function names any reader may call (built-ins and the session's UDFs);
    any other function needs ``admin``. ``data_source(name)``: whether Spark
    resolves ``name`` as a data source (default: the known short names as
    Java compares them)."""
    data_source = data_source or folded_data_source
    db = (current_db or "default").lower()
    need = Requirement(R.READER, _what(plan.root))
    for node in plan.nodes.values():
        # Script transforms are named for the error even inside a query.
        found = _node_requirement(plan, node, db, builtins, data_source)
        if found.role != R.READER and node.name in _WHAT and found.what == _what(plan.root):
            found = Requirement(found.role, _WHAT[node.name])
        need = _max(need, found)
    return need


def authorise(plan: Plan, roles: frozenset[str] | set[str], current_db: str | None,
              builtins: frozenset[str] = frozenset(), data_source: Any = None) -> Decision:
    """May a user holding ``roles`` run ``plan``?"""
    need = requirement(plan, current_db, builtins, data_source)
    return Decision(need.role is not NOBODY and R.allows(roles, need.role), need)
