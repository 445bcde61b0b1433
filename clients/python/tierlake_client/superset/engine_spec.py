"""Apache Superset's engine spec for tierlake (``superset.db_engine_specs`` entry point).

Superset picks a spec by the SQLAlchemy backend name (``tierlake``); without
one it falls back to its base spec, whose generic sqlglot dialect cannot parse
backticks, which has no time grains and which shows errors as a Thrift repr.
This spec is Superset's Spark SQL spec (tierlake's gateway relays to Spark's
Thrift server) with what differs:

- sqlglot parses our SQL as Spark SQL: Superset chooses sqlglot's dialect from
  a module-level map keyed by the spec's ``engine`` (there is no spec
  attribute for it), so importing this module adds ``tierlake → spark``;
- errors read as ``<first line> (SQLSTATE xxxxx)``, taken from the Thrift
  ``TStatus`` the gateway returned, without Java stacks, and the common ones
  get Superset's error types (table/column not found, syntax, access denied);
- ``CALL sys.…`` may change tierlake's state (a KV snapshot, a lease, a
  registration), which sqlglot cannot know: on a database where DML is not
  allowed, a CALL of a procedure that ``sys.procedures`` does not list as
  read-only is refused with Superset's own DML error;
- views and tables are listed through the ``tierlake://`` dialect's inspector
  (Spark's ``SHOW VIEWS`` answers namespace first, which Superset's Hive spec
  reads as the view name);
- ``SHOW FUNCTIONS`` answers a ``function`` column (SQL Lab's autocomplete);
- statements without a result set (CTAS, CVAS, ``CREATE OR REPLACE VIEW``,
  ``CACHE TABLE``, an ``INSERT``) report success with no rows: Spark's Thrift
  Server describes them as one ``Result`` column and answers their fetch with a
  row set PyHive cannot decode;
- a failed connection test says why (refused port, TLS mismatch, a password
  with ``auth=noSasl``), not ``(builtins.NoneType) None``;
- on a database without DML, Spark's statements that change tables, files or
  the classpath although sqlglot does not parse them as DDL/DML (``LOAD DATA``,
  ``ANALYZE TABLE``, ``MSCK REPAIR TABLE``, ``ADD JAR``, ``CACHE TABLE … AS
  SELECT``, ``REFRESH``) are refused like an ``INSERT``;
- a view's text comes from ``SHOW CREATE TABLE`` (the dialect's
  ``get_view_definition``), never Presto's ``SHOW CREATE VIEW``, which Spark
  rejects;
- no file upload: Superset's Hive upload writes Parquet to S3 (boto3) and
  creates an external table over it, which a tierlake server does not have;
- one catalog, Spark's session catalog ``spark_catalog``: Superset's Hive spec
  inherits Presto's catalogs, whose default is the URL's database (``default``,
  a schema for HiveServer2) while the list is Spark's ``SHOW CATALOGS``
  (``spark_catalog``), so datasets got a catalog the list does not have; and
  a connection cannot switch catalogs (every query runs in the session catalog).

Identity: the gateway sees the user of the connection URL, one per
connection; Superset's *Impersonate the logged on user* changes nothing for
tierlake (the user of every query is still the URL's).

Connection URL: ``tierlake://user:password@host:10000/default`` (options
``?ssl=true&ca_file=/path/ca.pem`` for a TLS gateway).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import sqlglot
from sqlglot.dialects.dialect import Dialects
from superset.db_engine_specs.spark import SparkEngineSpec
from superset.errors import SupersetErrorType
from superset.exceptions import SupersetDMLNotAllowedException
from superset.sql import parse as superset_parse

from tierlake_client.sqltext import sql_literal
from tierlake_client.superset.statements import connection_error_text, spark_change, without_result_set

ENGINE = "tierlake"
# Spark's session catalog: every query of a tierlake connection runs in it (tierlake makes it Iceberg's).
SESSION_CATALOG = "spark_catalog"

superset_parse.SQLGLOT_DIALECTS.setdefault(ENGINE, Dialects.SPARK)

# Spark's error texts, as the gateway relays them, and Superset's error types.
_TABLE_NOT_FOUND = re.compile(r"\[TABLE_OR_VIEW_NOT_FOUND\] The table or view (?P<table>\S+) cannot be found")
_COLUMN_NOT_FOUND = re.compile(r"\[UNRESOLVED_COLUMN\.\w+\] A column[^`]*(?P<column>`[^`]+`)")
_SYNTAX = re.compile(r"\[PARSE_SYNTAX_ERROR\] (?P<detail>.*)")
_SPARK_CHANGE = re.compile(r"does not allow for DDL/DML: (?P<kind>[^;]+?) changes")
_DML = re.compile(r"does not allow for DDL/DML")
_NO_CONNECTION = re.compile(r"(?P<detail>cannot connect to the gateway at .*)")
_DENIED = re.compile(
    r"(?P<detail>(?:permission denied|not allowed|Authentication failed|Error validating the login).*)", re.IGNORECASE)


class SparkChangeNotAllowed(SupersetDMLNotAllowedException):
    """Superset's DML refusal, naming the Spark statement (``LOAD DATA``, ``ADD JAR``, …) it refuses."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.error = dataclasses.replace(
            self.error, message=f"This database does not allow for DDL/DML: {kind} changes tables, files or the "
                                "session; allow DML on the connection to run it")
        self.message = self.error.message
        self.args = (self.message,)


class QueryFailed(Exception):
    """A statement that failed while it ran; carries HiveServer2's operation
    status (its ``errorMessage`` and ``sqlState``)."""

    def __init__(self, state: Any):
        super().__init__(state)
        self.state = state

    def __str__(self) -> str:
        return str(getattr(self.state, "errorMessage", "") or "query failed")


def thrift_status(ex: BaseException) -> Any | None:
    """The Thrift object carrying the error inside a PyHive error: a ``TStatus``
    (``TExecuteStatementResp(status=TStatus(…))``) or an operation status
    (``TGetOperationStatusResp``), if any."""
    seen = 0
    while ex is not None and seen < 5:
        for arg in getattr(ex, "args", ()):
            if getattr(arg, "errorMessage", None) and hasattr(arg, "sqlState"):
                return arg
            status = getattr(arg, "status", None)
            if getattr(status, "errorMessage", None):
                return status
        # Superset hands over exceptions, and on some paths their text.
        ex = getattr(ex, "__cause__", None) or getattr(ex, "__context__", None)
        seen += 1
    return None


# "org.apache.hive.service.cli.HiveSQLException: Error running query: org.apache.spark.SparkException: Job
# aborted …: java.lang.RuntimeException: boom": what the user wrote or hit is after the last class name.
_JAVA_PREFIX = re.compile(r"^(?:.*?(?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*(?:Exception|Error):\s*)+")


def _first_line(message: str) -> str:
    lines = [line for line in message.strip().splitlines() if line.strip()]
    first = lines[0].strip() if lines else "error without a message"
    return _JAVA_PREFIX.sub("", first).strip() or first


def readable_error(ex: BaseException) -> str:
    """``<first line of the server's message> (SQLSTATE xxxxx)``, Java class
    names and stacks removed; other errors as their first line."""
    status = thrift_status(ex)
    if status is None:
        reason = connection_error_text(ex)
        if reason is not None:
            return _first_line(reason)
        text = str(ex)
        # A repr that still carries the Thrift fields (e.g. re-raised as text).
        match = re.search(r"errorMessage=(['\"])(.*?)(?<!\\)\1", text, re.DOTALL)
        if match:
            text = match.group(2).encode().decode("unicode_escape", errors="replace")
        elif len(getattr(ex, "args", ())) == 2 and ex.args[0] == "Query error":
            text = str(ex.args[1])  # Superset's Hive spec: Exception("Query error", errorMessage)
        state = re.search(r"sqlState=['\"]?(\w{5})", str(ex))
        first = _first_line(text) if text.strip() else type(ex).__name__
        return f"{first} (SQLSTATE {state.group(1)})" if state else first
    first = _first_line(status.errorMessage or "")
    return f"{first} (SQLSTATE {status.sqlState})" if status.sqlState else first


_NAME_PART = r"(?:`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*)"
_CALLED = re.compile(rf"\s*({_NAME_PART}(?:\s*\.\s*{_NAME_PART})*)\s*\(")


def called_procedure(statement: str) -> str | None:
    """``sys.<name>`` when ``statement`` is a ``CALL`` (comments skipped, any
    quoting and case), else ``None``; ``"?"`` for a CALL whose name cannot be read."""
    try:
        tokens = sqlglot.tokenize(statement, read="spark")
    except sqlglot.errors.SqlglotError:
        return "?" if re.match(r"\s*call\b", statement, re.IGNORECASE) else None
    if not tokens or tokens[0].text.upper() != "CALL":
        return None
    # sqlglot's Spark tokenizer keeps the rest of a CALL as one raw string.
    match = _CALLED.match(statement[tokens[0].end + 1:])
    if match is None:
        return "?"
    parts = [p.strip()[1:-1].replace("``", "`") if p.strip().startswith("`") else p.strip()
             for p in re.findall(_NAME_PART, match.group(1))]
    name = ".".join(parts).lower()
    return name if len(parts) > 1 else f"sys.{name}"


class TierlakeEngineSpec(SparkEngineSpec):
    """tierlake's HiveServer2 gateway in front of Spark SQL with Iceberg."""

    engine = ENGINE
    engine_name = "tierlake"
    default_driver = "pyhive"
    sqlalchemy_uri_placeholder = "tierlake://user:password@host:10000/default[?ssl=true&ca_file=/path/ca.pem]"
    _show_functions_column = "function"
    # Superset's Hive upload writes Parquet to S3 and makes an external table over it.
    supports_file_upload = False
    # One catalog, the session catalog; Presto's (which Hive's spec inherits) may be switched per query.
    supports_catalog = True
    supports_dynamic_catalog = False

    metadata = {
        "description": "Fluss-style lake tiering on Apache Spark and Iceberg, over HiveServer2.",
        "homepage_url": "https://spark.apache.org/sql/",
        "pypi_packages": ["tierlake-client"],
        "connection_string": "tierlake://{username}:{password}@{hostname}:{port}/{database}",
        "default_port": 10000,
    }

    custom_errors = {
        _TABLE_NOT_FOUND: ("Table or view %(table)s does not exist", SupersetErrorType.TABLE_DOES_NOT_EXIST_ERROR, {}),
        _COLUMN_NOT_FOUND: ("Column %(column)s does not exist", SupersetErrorType.COLUMN_DOES_NOT_EXIST_ERROR, {}),
        _SYNTAX: ("Syntax error: %(detail)s", SupersetErrorType.SYNTAX_ERROR, {}),
        _SPARK_CHANGE: ("This database does not allow DML, and %(kind)s changes tables, files or the session "
                        "(allow DML on the connection to run it)", SupersetErrorType.DML_NOT_ALLOWED_ERROR, {}),
        _DML: ("This database does not allow DML, and this CALL changes tierlake's state (only read-only "
               "procedures, sys.procedures.read_only, may be called)", SupersetErrorType.DML_NOT_ALLOWED_ERROR, {}),
        _NO_CONNECTION: ("%(detail)s", SupersetErrorType.CONNECTION_PORT_CLOSED_ERROR, {}),
        _DENIED: ("%(detail)s", SupersetErrorType.CONNECTION_ACCESS_DENIED_ERROR, {}),
    }

    @classmethod
    def get_default_catalog(cls, database: Any) -> str | None:
        # Presto's answer is the URL's database, which for HiveServer2 is the schema ("default").
        return SESSION_CATALOG

    @classmethod
    def get_catalog_names(cls, database: Any, inspector: Any) -> set[str]:
        # Not SHOW CATALOGS: it also lists catalogs a connection cannot switch to (and tierlake's internal one).
        return {SESSION_CATALOG}

    @classmethod
    def _extract_error_message(cls, ex: Exception) -> str:
        return readable_error(ex)

    @classmethod
    def fetch_data(cls, cursor: Any, limit: int | None = None) -> list[tuple[Any, ...]]:
        # Superset's Hive spec raises Exception("Query error", message) for a
        # statement that failed while running, dropping its SQLSTATE; the
        # operation status has both.
        from pyhive import hive

        state = cursor.poll()
        if state.operationState == hive.ttypes.TOperationState.ERROR_STATE:
            raise QueryFailed(state)
        if without_result_set(cursor):
            # DDL and writes: nothing to fetch (PyHive cannot decode the empty
            # row set Spark sends for its one "Result" column).
            try:
                return super().fetch_data(cursor, limit) if cursor.description else []
            except TypeError:
                return []
        return super().fetch_data(cursor, limit)

    @classmethod
    def get_create_view(cls, database: Any, schema: str | None, table: str) -> str | None:
        # Presto's spec (which Hive's and Spark's inherit) sends SHOW CREATE VIEW,
        # which Spark rejects (a Java stack in spark.log per preview): the
        # dialect lists views and reads their text with SHOW CREATE TABLE.
        with database.get_inspector(schema=schema) as inspector:
            if table.lower() not in {name.lower() for name in inspector.get_view_names(schema)}:
                return None
            return inspector.get_view_definition(table, schema)

    @classmethod
    def get_view_names(cls, database: Any, inspector: Any, schema: str | None) -> set[str]:
        return set(inspector.get_view_names(schema))

    @staticmethod
    def execute(cursor: Any, query: str, database: Any, async_: bool = False) -> None:  # type: ignore[override]
        allow_dml = getattr(database, "allow_dml", False)
        change = None if allow_dml else spark_change(query)
        if change is not None:
            # sqlglot parses these as commands (or as a cache or a refresh), which
            # Superset's own DML guard lets through.
            raise SparkChangeNotAllowed(change)
        procedure = called_procedure(query)
        if procedure is not None and not allow_dml:
            # sys.procedures says which procedures only read (sys.version,
            # sys.list_tiering_statuses, ...); any other CALL, an unknown one
            # included, is refused as Superset refuses an INSERT.
            cursor.execute(f"SELECT read_only FROM sys.procedures WHERE name = {sql_literal(procedure)}")
            rows = cursor.fetchall()
            if not (rows and rows[0][0] is True):
                raise SupersetDMLNotAllowedException()
        cursor.execute(query, **{"async": async_})
