"""Authentication and authorisation at the gateway.

Without a password file the gateway is in development mode: any user name
and password are accepted and every user may do everything (what tierlake
did before roles existed). With ``tierlake.gateway.password-file`` set, logins
are checked against it and each statement needs a role (server/sqlapi/roles.py):

- ``CALL sys.<name>``: the role the procedure declared when it registered
  (:attr:`Procedure.role`; ``admin`` for a name no registry knows);
- queries (SELECT, VALUES, SHOW, DESCRIBE, EXPLAIN, USE, CACHE) and session
  settings (``SET spark.sql.…=…`` except catalogs, extensions and other
  class-loading keys; ``RESET``): ``reader``;
- INSERT, MERGE, UPDATE, DELETE into a table outside ``sys``: ``writer``;
- anything else (DDL, writes to ``sys`` or to directories, ADD JAR, Iceberg's
  own ``CALL`` procedures, calls of ``reflect``/``java_method``, queries of
  files by path such as ``csv.`/path```), and whatever cannot be classified: ``admin``.

Classification fails closed: a statement that does not parse needs ``admin``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from tierlake.server.exceptions import PermissionDeniedError, TierlakeError
from tierlake.server.gateway.callparse import is_sys_call, parse_call
from tierlake.server.gateway.passwords import PasswordFile
from tierlake.server.sqlapi import roles as R
from tierlake.server.sqlapi.registry import default as default_registry

log = logging.getLogger("tierlake.gateway")

DIALECT = "spark"
SYS_DATABASE = "sys"
# Functions that call arbitrary static Java methods in the server's JVM.
JVM_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect"})
# `format`.`path` in FROM reads files of the server's file system directly.
FILE_SOURCES = frozenset({"csv", "json", "text", "parquet", "orc", "avro", "binaryfile", "libsvm",
                          "iceberg", "delta", "hive", "jdbc"})
# SET key=value is a reader's for session settings of Spark SQL, except those
# that load classes or reach outside the session.
_SET_ASSIGN = re.compile(r"^\s*SET\s+(?P<key>[^=]+?)\s*=", re.IGNORECASE | re.DOTALL)
_RESET = re.compile(r"^\s*RESET\b", re.IGNORECASE)
SESSION_CONF_PREFIX = "spark.sql."
PROTECTED_CONF = ("spark.sql.catalog", "spark.sql.extensions", "spark.sql.warehouse", "spark.sql.hive.metastore",
                  "spark.sql.sources.", "spark.sql.queryexecutionlisteners", "spark.sql.streaming")
READ_COMMANDS = frozenset({"SHOW", "DESCRIBE", "DESC", "EXPLAIN", "USE", "SET", "RESET"})
_READ_NODES = (exp.Select, exp.SetOperation, exp.Subquery, exp.Values, exp.Describe, exp.Use,
               exp.Set, exp.Cache, exp.Uncache)
_WRITE_NODES = (exp.Insert, exp.Merge, exp.Update, exp.Delete)


@dataclass(frozen=True)
class Requirement:
    role: str
    what: str  # how the statement is named in the error message


def _calls_jvm(statement: str) -> bool:
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(statement)
    except Exception:  # noqa: BLE001 - whatever the tokenizer chokes on fails closed
        return True
    for tok, nxt in zip(tokens, tokens[1:], strict=False):
        if nxt.token_type == TokenType.L_PAREN and tok.text.strip("`").lower() in JVM_FUNCTIONS:
            return True
    return False


def _table_database(table: exp.Table, current_database: str | None) -> str:
    return (table.db or current_database or "default").lower()


def _reads_files(tree: exp.Expression) -> bool:
    return any(t.db and t.db.lower() in FILE_SOURCES and not t.catalog for t in tree.find_all(exp.Table))


def _classify_tree(tree: exp.Expression, current_database: str | None) -> Requirement:
    name = type(tree).__name__.upper()
    if isinstance(tree, exp.Command):
        keyword = str(tree.this or "").split()[0].upper() if str(tree.this or "").split() else ""
        if keyword in READ_COMMANDS:
            return Requirement(R.READER, keyword)
        return Requirement(R.ADMIN, keyword or "this statement")
    if _reads_files(tree):
        return Requirement(R.ADMIN, "a query of files by path")
    if isinstance(tree, _READ_NODES):
        return Requirement(R.READER, "SELECT" if isinstance(tree, (exp.Select, exp.SetOperation)) else name)
    if isinstance(tree, _WRITE_NODES):
        target = tree.this
        if isinstance(target, exp.Schema):  # INSERT INTO t (a, b)
            target = target.this
        if not isinstance(target, exp.Table):
            return Requirement(R.ADMIN, f"{name} into {type(target).__name__.lower()}")
        if _table_database(target, current_database) == SYS_DATABASE:
            return Requirement(R.ADMIN, f"{name} on sys tables (use the sys procedures)")
        return Requirement(R.WRITER, name)
    return Requirement(R.ADMIN, name if name not in ("ALTER", "CREATE", "DROP") else f"{name} (DDL)")


def classify(statement: str, current_database: str | None = None, registry: Any = None) -> Requirement:
    """The role a statement needs (see the module docstring).

    ``registry`` is the one the handler will look the CALL up in; without
    one, procedures are looked up in the default registry and a name it does
    not know needs ``admin``.
    """
    if is_sys_call(statement):
        try:
            name = parse_call(statement).name
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
    if _calls_jvm(statement):
        return Requirement(R.ADMIN, "reflect/java_method")
    assignment = _SET_ASSIGN.match(statement)
    if assignment is not None:
        key = assignment.group("key").strip().strip("`").lower()
        if key.startswith(SESSION_CONF_PREFIX) and not key.startswith(PROTECTED_CONF):
            return Requirement(R.READER, "SET")
        return Requirement(R.ADMIN, f"SET {key}")
    if _RESET.match(statement):
        return Requirement(R.READER, "RESET")
    try:
        trees = [t for t in sqlglot.parse(statement, read=DIALECT) if t is not None]
    except (ParseError, TokenError, RecursionError, Exception):  # noqa: BLE001 - fails closed below
        trees = []
    if not trees:
        return Requirement(R.ADMIN, "a statement tierlake cannot classify")
    needs = [_classify_tree(t, current_database) for t in trees]
    order = {R.READER: 0, R.WRITER: 1, R.ADMIN: 2}
    return max(needs, key=lambda n: order.get(n.role, 2))


class Authorizer:
    """Logins and per-statement checks; ``passwords=None`` is development mode."""

    def __init__(self, passwords: PasswordFile | None = None, registry: Any = None):
        self.passwords = passwords
        self.registry = registry

    @property
    def enabled(self) -> bool:
        return self.passwords is not None

    def authenticate(self, user: str, password: str) -> bool:
        return True if self.passwords is None else self.passwords.authenticate(user, password)

    def roles(self, user: str | None) -> frozenset[str]:
        return frozenset(R.ROLES) if self.passwords is None else self.passwords.roles(user)

    def check(self, user: str | None, statement: str, current_database: str | None = None) -> None:
        """Raise :class:`PermissionDeniedError` unless ``user`` may run ``statement``."""
        if self.passwords is None:
            return
        need = classify(statement, current_database, self.registry)
        held = self.roles(user)
        if R.allows(held, need.role):
            return
        granted = sorted(R.GRANTED_BY[need.role])
        log.warning("denied %s to user %r (roles %s)", need.what, user, sorted(held))
        raise PermissionDeniedError(
            f"permission denied: {need.what} needs the {' or '.join(granted)} role; "
            f"user {user!r} has {', '.join(sorted(held)) or 'no role'}"
        )
