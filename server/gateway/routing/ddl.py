"""Recognising the DDL the engine runs for the gateway: ``CREATE TABLE`` of
tiered tables and ``ALTER TABLE … SET TBLPROPERTIES`` of tiering properties,
read into the commands of server/tiering/ddl.py, which runs them.

Spark 3.5 would make a Hive SerDe table of a ``CREATE TABLE`` without
``USING``; a statement with ``'table.datalake.enabled'='true'`` instead becomes
an Iceberg stream table with the right layout, its lake table, and a
coordinator registration (docs/design.md, 'Tables').
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from tierlake.server.catalog.properties import BUCKETS, ENABLED, PRIMARY_KEY, SEQUENCE_BY, governed, validate
from tierlake.server.catalog.spec import Column
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.exceptions import InvalidArgumentError, SqlSyntaxError
from tierlake.server.tiering.ddl import TieredCreate

# Substrings of every key that may name a tiering property, misspelt ones
# included ('table.datalake.enable', 'primary_key', 'bucket_num'): a CREATE
# holding one is read, so a misspelling is refused instead of becoming a
# plain (Hive text) table.
_CREATE_MARKERS = ("datalake", "primary", "bucket", "sequence", "table.log.", "kv.", "tierlake.")


def _quick_check(statement: str) -> bool:
    lowered = statement.lower()
    return "create" in lowered and any(m in lowered for m in _CREATE_MARKERS)


def may_be_tiering_ddl(statement: str) -> bool:
    """A cheap superset (substring tests) of the statements
    :func:`parse_tiered_create` or :func:`parse_tiering_alter` take, for
    callers that have no parse of the statement yet."""
    lowered = statement.lower()
    return _quick_check(statement) or (
        "alter" in lowered and any(m in lowered for m in _ALTER_MARKERS))


def parse_tiered_create(statement: str, current_database: str = "default") -> TieredCreate | None:
    """The statement, if it creates a tiered table; None for anything else."""
    if not _quick_check(statement):
        return None
    try:
        tree = sqlglot.parse_one(statement, read="spark")
    except (ParseError, TokenError):
        return None
    if not isinstance(tree, exp.Create) or (tree.kind or "").upper() != "TABLE":
        return None
    properties: dict[str, str] = {}
    using = None
    partitioned = False
    for prop in (tree.args.get("properties") or exp.Properties(expressions=[])).expressions:
        # FileFormatProperty and PartitionedByProperty are Property subclasses.
        if isinstance(prop, exp.FileFormatProperty):
            using = prop.this.name if isinstance(prop.this, exp.Expression) else str(prop.this)
        elif isinstance(prop, exp.PartitionedByProperty):
            partitioned = True
        elif isinstance(prop, exp.Property):
            key = prop.this.name if isinstance(prop.this, exp.Expression) else str(prop.this)
            value = prop.args.get("value")
            properties[key] = value.name if isinstance(value, exp.Expression) else str(value)
    if ENABLED not in properties:
        tiering = [k for k in properties if governed(k)]
        if not tiering:
            return None
        # A misspelt key gets its did-you-mean, whatever the table.
        validate({k: properties[k] for k in tiering})
        if (using or "").lower() == "iceberg":
            return None  # an Iceberg table to enable later (sys.enable_tiering reads these properties)
        raise InvalidArgumentError(
            f"table properties {', '.join(repr(k) for k in tiering)} configure tiering, but the table sets "
            f"neither '{ENABLED}'='true' nor USING iceberg, so Spark would make a plain Hive table of it: add "
            f"'{ENABLED}'='true' for a tiered table (or USING iceberg to enable tiering later)")
    # 'false' is a plain table; anything but 'true' is refused by the property check.
    if properties[ENABLED].strip().lower() == "false":
        return None
    if partitioned:
        raise InvalidArgumentError(
            "tiered tables choose their own partitioning (bucket.num, table.datalake.partition); "
            "remove PARTITIONED BY"
        )
    if using and using.lower() != "iceberg":
        raise InvalidArgumentError(f"tiered tables are Iceberg tables; USING {using} is not possible")
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    parts = [p.name for p in target.parts]
    if len(parts) == 3 and parts[0].lower() == "spark_catalog":
        parts = parts[1:]
    if len(parts) == 1:
        parts = [current_database, parts[0]]
    if len(parts) != 2:
        raise SqlSyntaxError(f"invalid table name {target.sql(dialect='spark')}")
    columns = []
    if isinstance(tree.this, exp.Schema):
        for col in tree.this.expressions:
            if not isinstance(col, exp.ColumnDef) or col.args.get("kind") is None:
                raise SqlSyntaxError(f"unsupported column definition {col.sql(dialect='spark')}")
            text = " ".join([col.args["kind"].sql(dialect="spark"), *(c.sql(dialect="spark") for c in col.constraints)])
            columns.append(Column(col.name.lower(), text))
    select = _query_text(statement) if tree.expression is not None else None
    if not columns and select is None:
        raise SqlSyntaxError("a tiered table needs columns")
    return TieredCreate(TablePath(parts[0].lower(), parts[1].lower()), columns, properties,
                        bool(tree.args.get("exists")), select)


def _query_text(statement: str) -> str:
    """The query of a ``CREATE TABLE … AS <query>`` exactly as the client wrote it: the text after the
    first ``AS`` outside parentheses (not ``STORED AS``). Never sqlglot's regeneration of it, which is not
    Spark's text: it rewrote ``named_struct('select', …)`` as ``STRUCT(… AS select)``, which Spark cannot
    parse, and a valid CTAS was refused."""
    depth, previous = 0, None
    for token in sqlglot.tokenize(statement, read="spark"):
        kind = token.token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and kind == TokenType.ALIAS and (previous is None or previous.text.upper() != "STORED"):
            return statement[token.end + 1:].strip().rstrip(";").strip()
        previous = token
    raise SqlSyntaxError("cannot find the query of CREATE TABLE … AS")


# Text that may name a property the registry checks (properties.governed).
_ALTER_MARKERS = ("table.datalake.", "table.log.", "kv.", PRIMARY_KEY, BUCKETS, SEQUENCE_BY, "tierlake.")


def parse_tiering_alter(statement: str, current_database: str = "default") -> tuple[TablePath, dict[str, str]] | None:
    """``ALTER TABLE t SET TBLPROPERTIES (...)`` that sets a tiering property
    (``table.datalake.*``, ``table.log.*``, ``kv.*``, ``primary-key``, ``bucket.num``,
    ``sequence-by`` or a refused ``tierlake.*`` key)."""
    lowered = statement.lower()
    if "alter" not in lowered or not any(m in lowered for m in _ALTER_MARKERS):
        return None
    try:
        tree = sqlglot.parse_one(statement, read="spark")
    except (ParseError, TokenError):
        return None
    if not isinstance(tree, exp.Alter) or (tree.args.get("kind") or "").upper() != "TABLE":
        return None
    properties: dict[str, str] = {}
    for action in tree.args.get("actions") or []:
        if isinstance(action, exp.AlterSet):
            for props in action.expressions:
                for prop in getattr(props, "expressions", []):
                    if isinstance(prop, exp.Property) and isinstance(prop.this, exp.Expression):
                        value = prop.args.get("value")
                        properties[prop.this.name] = value.name if isinstance(value, exp.Expression) else str(value)
    if not any(governed(k) for k in properties):
        return None
    parts = [p.name for p in tree.this.parts]
    if len(parts) == 1:
        parts = [current_database, parts[0]]
    return TablePath(parts[-2].lower(), parts[-1].lower()), properties
