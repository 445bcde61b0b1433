"""What a tiered table is, from its table properties (docs/design.md, 'Tables')."""

from __future__ import annotations

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
from tierlake.server.exceptions import InvalidArgumentError

__all__ = ["BUCKETS", "CHUNK_ROWS", "DEFAULT_BUCKETS", "ENABLED", "LAKE_PARTITION", "MAX_ROUND", "PRIMARY_KEY",
           "QUALITY", "QUALITY_MODES", "SEQUENCE_BY", "CHANGE_TYPE", "CHANGE_TYPES", "Column", "TieredSpec",
           "quality_mode", "partition_sql", "data_columns"]

CHANGE_TYPE = "_change_type"
CHANGE_TYPES = ("+I", "-U", "+U", "-D")


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
        names = {c.name.lower() for c in columns}
        for key in self.primary_key:
            if key not in names:
                raise InvalidArgumentError(f"primary key column {key!r} is not a column of the table")
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
