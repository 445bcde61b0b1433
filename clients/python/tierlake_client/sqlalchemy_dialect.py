"""The SQLAlchemy dialect ``tierlake://`` (Superset, Redash, pandas).

``tierlake://user:password@host:10000/default`` connects like ``tierlake sql``
(:func:`tierlake_client.jdbc.connect`): SASL PLAIN with the password
from the URL, else ``$TIERLAKE_PASSWORD``; ``?ssl=true`` for a TLS gateway,
checked against ``ca_file=/path/ca.pem`` (else the system's trusted CAs);
``?auth=noSasl`` for a NOSASL gateway.

It is PyHive's Hive dialect with the reflection rewritten for Spark, whose
result shapes differ from Hive's:

- ``SHOW TABLES IN db`` answers (namespace, tableName, isTemporary) and lists
  views too; table names are its second column minus ``SHOW VIEWS IN db``.
- PyHive's ``has_table`` runs ``DESCRIBE <name>`` unquoted, which Spark
  answers for any query text (``DESCRIBE QUERY``), so ``pandas.read_sql`` took
  every query for a table name. Here a table exists when the catalog lists it.
- ``DESCRIBE TABLE`` rows are read up to Spark's blank separator row (before
  ``# Partitioning`` / ``# Partition Information``) and the full Spark type
  text is mapped, precision and scale included (:func:`spark_type`).

Every identifier in the dialect's own statements is quoted by sqlglot
(:func:`tierlake_client.sqltext.quote_ident`); compiled statements quote every
identifier with backticks, embedded backticks doubled.
"""

# No `from __future__ import annotations`, and no annotations on the methods
# decorated with @reflection.cache: SQLAlchemy 1.4's decorator rebuilds their
# signature as source text and cannot (string annotations fail; `list[str]`
# comes back as `list[str)`).
import datetime
import decimal
import getpass
import re
from typing import Any

from pyhive.sqlalchemy_hive import HiveCompiler, HiveDialect
from sqlalchemy import exc, text, types, util
from sqlalchemy.engine import URL, reflection
from sqlalchemy.sql import compiler

from tierlake_client import jdbc
from tierlake_client import sqltext as sqlfiles

# URL query options, as `tierlake sql` and Hive JDBC name them.
_OPTIONS = ("ssl", "ca_file", "auth")


class SparkDecimal(types.TypeDecorator):
    """``decimal(p,s)``: PyHive already returns :class:`decimal.Decimal`;
    text (older drivers, NULL-typed results) is converted too."""

    impl = types.DECIMAL
    cache_ok = True

    def process_result_value(self, value, dialect):
        if value is None or isinstance(value, decimal.Decimal):
            return value
        return decimal.Decimal(value)


class SparkTimestamp(types.TypeDecorator):
    """``timestamp`` (session time zone, shown without zone) and
    ``timestamp_ntz``: naive :class:`datetime.datetime` values."""

    impl = types.TIMESTAMP
    cache_ok = True

    def process_result_value(self, value, dialect):
        if value is None or isinstance(value, datetime.datetime):
            return value
        return datetime.datetime.fromisoformat(str(value))


class SparkDate(types.TypeDecorator):
    """``date``: HiveServer2 sends dates as text; returned as :class:`datetime.date`."""

    impl = types.DATE
    cache_ok = True

    def process_result_value(self, value, dialect):
        if isinstance(value, datetime.datetime):
            return value.date()
        if value is None or isinstance(value, datetime.date):
            return value
        return datetime.date.fromisoformat(str(value)[:10])


class SparkComplex(types.TypeDecorator):
    """``array<…>``, ``map<…>``, ``struct<…>``: HiveServer2 sends these as JSON
    text (``[1,2]``, ``{"k":1}``, ``{"a":1}``), and so they stay: a string
    type (BI tools group and display them as text) that keeps the Spark type
    in ``spark_type``. ``json.loads`` turns a value into Python lists/dicts."""

    impl = types.String
    cache_ok = True

    def __init__(self, spark_type: str = "", *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.spark_type = spark_type

    def __repr__(self) -> str:
        return f"SparkComplex({self.spark_type!r})"


# SQLAlchemy 2.0 has Double; 1.4 only Float (which is what Double subclasses).
_DOUBLE = getattr(types, "Double", types.Float)

_SIMPLE_TYPES: dict[str, type[types.TypeEngine] | types.TypeEngine] = {
    "boolean": types.Boolean,
    "tinyint": types.SmallInteger,
    "byte": types.SmallInteger,
    "smallint": types.SmallInteger,
    "short": types.SmallInteger,
    "int": types.Integer,
    "integer": types.Integer,
    "bigint": types.BigInteger,
    "long": types.BigInteger,
    "float": types.Float,
    "real": types.Float,
    "double": _DOUBLE,
    "string": types.String,
    "binary": types.LargeBinary,
    "date": SparkDate,
    "timestamp": SparkTimestamp,
    "timestamp_ltz": SparkTimestamp,
    "timestamp_ntz": SparkTimestamp,
    "void": types.NullType,
}

_PARAMETRISED = re.compile(r"^(\w+)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$")


def spark_type(type_text: str) -> types.TypeEngine:
    """The SQLAlchemy type of a Spark type as ``DESCRIBE TABLE`` prints it
    (``decimal(10,2)``, ``varchar(5)``, ``array<int>``, …); unknown types
    (intervals, variants) are :class:`~sqlalchemy.types.NullType` with a warning."""
    t = type_text.strip().lower()
    if t.startswith(("array<", "map<", "struct<")):
        return SparkComplex(t)
    m = _PARAMETRISED.match(t)
    if m:
        name, first, second = m.group(1), int(m.group(2)), m.group(3)
        if name in ("decimal", "dec", "numeric"):
            return SparkDecimal(precision=first, scale=int(second or 0))
        if name == "varchar":
            return types.VARCHAR(first)
        if name == "char":
            return types.CHAR(first)
    if t in ("decimal", "dec", "numeric"):
        return SparkDecimal(precision=10, scale=0)  # Spark's default decimal
    found = _SIMPLE_TYPES.get(t)
    if found is None:
        util.warn(f"Did not recognize Spark type {type_text!r}")
        return types.NullType()
    return found() if isinstance(found, type) else found


def describe_columns(rows: list[tuple]) -> list[tuple[str, str, str | None]]:
    """The (name, type, comment) rows of ``DESCRIBE TABLE`` output: they end at
    the first blank or ``#`` row (partitioning, detailed table information)."""
    columns = []
    for row in rows:
        name = (row[0] or "").strip()
        if not name or name.startswith("#"):
            break
        columns.append((name, (row[1] or "").strip(), row[2] if len(row) > 2 else None))
    return columns


class TierlakeIdentifierPreparer(compiler.IdentifierPreparer):
    # Every identifier quoted (Spark's reserved words depend on its ANSI
    # setting); PyHive's preparer leaves embedded backticks undoubled.
    def __init__(self, dialect):
        super().__init__(dialect, initial_quote="`", escape_quote="`")

    def _requires_quotes(self, value: str) -> bool:
        return True


class TierlakeCompiler(HiveCompiler):
    # PyHive's visit_column cuts `db`.`table`.`col` to `table`.`col` by
    # counting dots, which breaks on names holding a dot; Spark resolves the
    # three-part form as written.
    visit_column = compiler.SQLCompiler.visit_column


class TierlakeDialect(HiveDialect):
    """PyHive's Hive dialect with Spark's catalog answers and tierlake's
    connection options (see the module docstring)."""

    name = "tierlake"
    driver = "pyhive"
    preparer = TierlakeIdentifierPreparer
    statement_compiler = TierlakeCompiler
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls):
        # Defined here so SQLAlchemy does not fall back to (and warn about)
        # PyHive's deprecated ``dbapi`` classmethod.
        from pyhive import hive

        return hive

    def create_connect_args(self, url: URL):
        options = {k: v for k, v in url.query.items()}
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise exc.ArgumentError(
                f"unknown tierlake:// URL option(s) {', '.join(unknown)}; known: {', '.join(_OPTIONS)}")
        host = url.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"  # IPv6
        jdbc_url = f"jdbc:hive2://{host}:{url.port or 10000}/{url.database or 'default'}"
        if str(options.get("ssl", "")).lower() in ("true", "1"):
            jdbc_url += ";ssl=true"
        if options.get("auth"):
            jdbc_url += f";auth={options['auth']}"
        return [], {
            "url": jdbc_url,
            "user": url.username or getpass.getuser(),
            "password": url.password,
            "ca_file": options.get("ca_file") or None,
        }

    def connect(self, *cargs: Any, **cparams: Any):
        cparams["password"] = jdbc.resolve_password(cparams.get("password"))
        return jdbc.connect(*cargs, **cparams)

    def do_execute(self, cursor, statement, parameters, context=None):
        # SQLAlchemy hands PyHive an empty dict for statements without
        # parameters, and PyHive then applies `statement % {}`: right for
        # compiled statements (their `%` are doubled), wrong for plain SQL
        # strings (pandas.read_sql("… LIKE 'a%'")), whose `%` are literal.
        if not parameters and (context is None or context.compiled is None):
            cursor.execute(statement)
        else:
            cursor.execute(statement, parameters)

    # -- catalog ------------------------------------------------------------

    def get_schema_names(self, connection, **kw) -> list[str]:
        return [row[0] for row in connection.exec_driver_sql("SHOW NAMESPACES")]

    def _listing(self, connection, command: str, schema: str | None) -> list[tuple[str, bool]]:
        """(name, isTemporary) of ``SHOW TABLES``/``SHOW VIEWS`` [IN schema]."""
        statement = command + (f" IN {sqlfiles.quote_ident(schema)}" if schema else "")
        return [(row[1], bool(row[2])) for row in connection.exec_driver_sql(statement)]

    @reflection.cache
    def get_view_names(self, connection, schema=None, **kw):
        return [name for name, temporary in self._listing(connection, "SHOW VIEWS", schema) if not temporary]

    def get_temp_view_names(self, connection, schema: str | None = None, **kw) -> list[str]:
        return [name for name, temporary in self._listing(connection, "SHOW VIEWS", schema) if temporary]

    @reflection.cache
    def get_table_names(self, connection, schema=None, **kw):
        views = {name for name, _ in self._listing(connection, "SHOW VIEWS", schema)}
        return [name for name, temporary in self._listing(connection, "SHOW TABLES", schema)
                if not temporary and name not in views]

    def has_table(self, connection, table_name: str, schema: str | None = None, **kw) -> bool:
        # Compared in Python: SHOW TABLES LIKE takes a pattern (`*`, `|` and
        # regex characters), which no escaping makes exact for every name.
        # Spark's session catalog is case-insensitive and lists lower case.
        self._ensure_has_table_connection(connection)
        wanted = table_name.lower()
        return any(name.lower() == wanted for name, _ in self._listing(connection, "SHOW TABLES", schema))

    def _describe(self, connection, table_name: str, schema: str | None) -> list[tuple[str, str, str | None]]:
        if not self.has_table(connection, table_name, schema):
            raise exc.NoSuchTableError(f"{schema}.{table_name}" if schema else table_name)
        parts = (schema, table_name) if schema else (table_name,)
        rows = connection.exec_driver_sql(f"DESCRIBE TABLE {sqlfiles.quote_table(*parts)}").fetchall()
        return describe_columns(rows)

    @reflection.cache
    def get_columns(self, connection, table_name, schema=None, **kw):
        return [
            {"name": name, "type": spark_type(type_text), "nullable": True, "default": None,
             **({"comment": comment} if comment else {})}
            for name, type_text, comment in self._describe(connection, table_name, schema)
        ]

    def get_pk_constraint(self, connection, table_name: str, schema: str | None = None, **kw) -> dict:
        return {"constrained_columns": [], "name": None}

    def get_indexes(self, connection, table_name: str, schema: str | None = None, **kw) -> list[dict]:
        return []

    def get_view_definition(self, connection, view_name: str, schema: str | None = None, **kw) -> str:
        parts = (schema, view_name) if schema else (view_name,)
        rows = connection.execute(text(f"SHOW CREATE TABLE {sqlfiles.quote_table(*parts)}")).fetchall()
        return rows[0][0] if rows else ""
