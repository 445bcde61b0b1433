"""What a tiered table is, from its table properties (docs/design.md, 'Tables')."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tierlake import sql
from tierlake.server.catalog.properties import (  # the keys' one definition; re-exported for callers
    BUCKETS,
    CHUNK_ROWS,
    DEFAULT_BUCKETS,
    ENABLED,
    LAKE_PARTITION,
    MAX_ROUND,
    PRIMARY_KEY,
    QUALITY,
    QUALITY_MODES,
    SEQUENCE_BY,
    user_properties,
    validate,
)
from tierlake.server.catalog.transforms import parse_transform, split_transforms
from tierlake.server.exceptions import InvalidArgumentError, ReservedNameError, UnsupportedKeyTypeError

__all__ = ["BUCKETS", "CHUNK_ROWS", "DEFAULT_BUCKETS", "ENABLED", "LAKE_PARTITION", "MAX_ROUND", "PRIMARY_KEY",
           "QUALITY", "QUALITY_MODES", "SEQUENCE_BY", "CHANGE_TYPE", "CHANGE_TYPES", "Column", "TieredSpec",
           "quality_mode", "partition_sql", "data_columns", "RESERVED_PREFIX", "ICEBERG_METADATA_COLUMNS",
           "refuse_reserved_names", "refuse_odd_field_names",
           "refuse_odd_struct_fields", "odd_field_name", "struct_field_names"]

CHANGE_TYPE = "_change_type"
CHANGE_TYPES = ("+I", "-U", "+U", "-D")

# Every alias, CTE, window and helper column tierlake's statements generate (sql/templates/, and the
# Java classes' plans: FreshMerge.java) starts with this prefix; no column of a tiered table may
# (docs/tiering.md, "Reserved names"). Compared case-insensitively, as Spark resolves names.
RESERVED_PREFIX = "__tierlake"
# Iceberg's metadata columns (Iceberg's MetadataColumns and SparkTable.metadataColumns): Iceberg refuses to
# read a table with a column of one of these names ("Table column names conflict with names reserved for
# Iceberg metadata columns"), and tiering joins each stream row to its data file by `_file`.
ICEBERG_METADATA_COLUMNS = ("_file", "_pos", "_deleted", "_spec_id", "_partition", "_row_id",
                            "_last_updated_sequence_number")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark SQL type text, e.g. "BIGINT", "DECIMAL(10,2)"


@dataclass
class TieredSpec:
    """A stream table's tiering layout."""

    primary_key: list[str] = field(default_factory=list)
    buckets: int = DEFAULT_BUCKETS
    sequence_by: str | None = None
    lake_partition: list[str] = field(default_factory=list)
    quality: str = "off"

    @property
    def is_primary_key(self) -> bool:
        return bool(self.primary_key)

    @classmethod
    def from_properties(cls, props: dict[str, str], columns: list[Column] | None = None) -> TieredSpec:
        if columns is not None:
            # Creating or enabling a table: every user property is checked first,
            # with the error naming the property, the value and an example.
            validate(user_properties(props), columns)
        pk = [c.strip().lower() for c in (props.get(PRIMARY_KEY) or "").split(",") if c.strip()]
        try:
            buckets = int(props.get(BUCKETS, DEFAULT_BUCKETS))
        except ValueError:
            raise InvalidArgumentError(f"'{BUCKETS}' must be a whole number, got {props.get(BUCKETS)!r}") from None
        if not 1 <= buckets <= 1024:
            raise InvalidArgumentError(f"'{BUCKETS}' must be between 1 and 1024, got {buckets}")
        seq = (props.get(SEQUENCE_BY) or "").strip().lower() or None
        partition = split_transforms(props.get(LAKE_PARTITION) or "")
        spec = cls(pk, buckets, seq, partition, quality_mode(props.get(QUALITY)))
        if columns is not None:
            spec.validate(columns)
        return spec

    def validate(self, columns: list[Column]) -> None:
        refuse_reserved_names(columns)
        names = {c.name.lower() for c in columns}
        for key in self.primary_key:
            if key not in names:
                raise InvalidArgumentError(f"primary key column {key!r} is not a column of the table")
        refuse_unsupported_key_types(self.primary_key, columns)
        if self.sequence_by and self.sequence_by not in names:
            raise InvalidArgumentError(f"'{SEQUENCE_BY}' column {self.sequence_by!r} is not a column of the table")
        if self.sequence_by and not self.primary_key:
            raise InvalidArgumentError(f"'{SEQUENCE_BY}' needs a '{PRIMARY_KEY}'")
        for transform in self.lake_partition:
            column = parse_transform(transform, LAKE_PARTITION).column
            if column not in names:
                raise InvalidArgumentError(f"'{LAKE_PARTITION}': {column!r} is not a column of the table")
        if CHANGE_TYPE in names and not self.primary_key:
            raise InvalidArgumentError(f"column {CHANGE_TYPE} is reserved for primary-key tables")


def refuse_reserved_names(columns: list[Column]) -> None:
    """Refuse a column named with :data:`RESERVED_PREFIX` or like an Iceberg metadata column."""
    for c in columns:
        name = c.name.lower()
        if name.startswith(RESERVED_PREFIX):
            raise ReservedNameError(
                f"column {c.name!r}: names starting with {RESERVED_PREFIX!r} are reserved for the aliases and "
                "helper columns tierlake generates; rename the column")
        if name in ICEBERG_METADATA_COLUMNS:
            raise ReservedNameError(
                f"column {c.name!r} has the name of an Iceberg metadata column "
                f"({', '.join(ICEBERG_METADATA_COLUMNS)}), which Iceberg cannot read a table with; rename the column")


# The key column types tierlake compares exactly as Spark compares grouping keys (docs/tiering.md, "Key
# types"; SparkKeys.java): the first word of the type's SQL text, as Spark or its parser spells it.
KEY_TYPES = frozenset({"tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long", "decimal", "dec",
                       "numeric", "string", "char", "varchar", "binary", "date", "timestamp", "timestamp_ntz",
                       "timestamp_ltz", "boolean", "float", "real", "double"})
# Key types Iceberg's bucket transform cannot take: not the first key column (the stream and lake tables
# are bucketed by it; create_stream_table.sql.j2).
UNBUCKETED_KEY_TYPES = frozenset({"boolean", "float", "real", "double"})


def _type_name(type_text: str) -> str:
    text = type_text.strip().lower()
    for i, ch in enumerate(text):
        if not (ch.isalnum() or ch == "_"):
            return text[:i]
    return text


def refuse_unsupported_key_types(primary_key: list[str], columns: list[Column]) -> None:
    """Refuse a primary-key column of a type tierlake does not compare as Spark does, or a first key
    column of a type Iceberg cannot bucket by, before anything is made (``UnsupportedKeyTypeError``)."""
    types = {c.name.lower(): c.type for c in columns}
    for i, key in enumerate(primary_key):
        if key not in types:
            continue
        name = _type_name(types[key])
        if name not in KEY_TYPES:
            raise UnsupportedKeyTypeError(
                f"primary key column {key!r} has type {types[key].strip()}, which cannot be a key: key columns "
                "are BOOLEAN, integers (TINYINT to BIGINT), FLOAT, DOUBLE, DECIMAL, STRING (CHAR, VARCHAR), "
                "BINARY, DATE, TIMESTAMP or TIMESTAMP_NTZ; ARRAY, MAP and STRUCT columns cannot be")
        if i == 0 and name in UNBUCKETED_KEY_TYPES:
            raise UnsupportedKeyTypeError(
                f"primary key column {key!r} has type {types[key].strip()}, which cannot be the first key column: "
                "the table is bucketed by its first key column, and a BOOLEAN, FLOAT or DOUBLE column cannot be "
                "bucketed; put a key column of another type first (e.g. 'primary-key'='id, " + key + "')")


# What a STRUCT field name may hold. The metastore keeps each column's type as Hive type text with the
# field names unquoted (`struct<a b:int,c:d:string>`): Iceberg's Hive catalog writes it at every commit and
# the metastore parses it (Hive's TypeInfoParser: a `:`, `,`, `<`, `-`, … fails every commit after the
# create, CommitStateUnknownException), and Spark parses the fresh view's (CatalystSqlParser, unquoted
# identifiers: a space, `.`, `$` or a non-ASCII letter fails every read of the view, CANNOT_RECOGNIZE_HIVE_TYPE).
_HIVE_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def odd_field_name(name: str) -> bool:
    """``name`` (a STRUCT field's) cannot be written to the metastore's column type text."""
    return not name or _HIVE_FIELD_NAME.fullmatch(name) is None


def struct_field_names(type_text: str) -> list[str]:
    """The STRUCT field names, at any depth, of a column type written as in a ``CREATE TABLE``."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(f"CREATE TABLE t (c {type_text})", read="spark")
    except Exception:  # noqa: BLE001 - Spark's parse of the statement is the judge of its syntax
        return []
    columns = list(tree.find_all(exp.ColumnDef))
    return [c.name for c in columns[1:]]


def refuse_odd_field_names(columns: list[Column]) -> None:
    """Refuse a STRUCT field name the metastore cannot hold (:func:`odd_field_name`), before anything is made."""
    for c in columns:
        refuse_odd_struct_fields(c.name, struct_field_names(c.type))


def refuse_odd_struct_fields(column: str, names: list[str]) -> None:
    odd = [n for n in names if odd_field_name(n)]
    if odd:
        raise InvalidArgumentError(
            f"column {column!r}: STRUCT field name{'s' if len(odd) > 1 else ''} {', '.join(repr(n) for n in odd)} "
            "cannot be stored in the metastore: it keeps column types as Hive type text with field names unquoted, "
            "which the table's commits and the fresh view's reads parse; a field name is ASCII letters, digits and "
            "'_', not starting with a digit; rename the field")


def quality_mode(value: str | None) -> str:
    """The data-quality mode of a table: off (default), warn or block (docs/design.md, 'Data quality')."""
    mode = (value or "off").strip().lower()
    if mode not in QUALITY_MODES:
        raise InvalidArgumentError(f"'{QUALITY}' must be one of {', '.join(QUALITY_MODES)}; got {value!r}")
    return mode


def partition_sql(transform: str) -> str:
    """A validated transform rebuilt with a quoted column: ``days(ts)`` → ``days(`ts`)``."""
    t = parse_transform(transform, LAKE_PARTITION)
    column = sql.quote_ident(t.column)
    if t.width is not None:
        return f"{t.name}({t.width}, {column})"
    return column if t.name == "identity" else f"{t.name}({column})"


def data_columns(columns: list[Column]) -> list[Column]:
    """The columns the lake table carries (no change-type bookkeeping)."""
    return [c for c in columns if c.name.lower() != CHANGE_TYPE]
