"""What a tiered table is, from its table properties (DESIGN §4)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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
)
from tierlake.server.exceptions import InvalidArgumentError

__all__ = ["BUCKETS", "CHUNK_ROWS", "DEFAULT_BUCKETS", "ENABLED", "LAKE_PARTITION", "MAX_ROUND", "PRIMARY_KEY",
           "QUALITY", "QUALITY_MODES", "SEQUENCE_BY", "CHANGE_TYPE", "CHANGE_TYPES", "Column", "TieredSpec",
           "quality_mode", "partition_sql", "data_columns"]

CHANGE_TYPE = "_change_type"
CHANGE_TYPES = ("+I", "-U", "+U", "-D")
_TRANSFORM = re.compile(
    r"^\s*(years|months|days|hours|identity|bucket|truncate)\s*\((.*)\)\s*$|^\s*([A-Za-z_]\w*)\s*$", re.I
)


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
        pk = [c.strip().lower() for c in (props.get(PRIMARY_KEY) or "").split(",") if c.strip()]
        try:
            buckets = int(props.get(BUCKETS, DEFAULT_BUCKETS))
        except ValueError:
            raise InvalidArgumentError(f"'{BUCKETS}' must be a whole number, got {props.get(BUCKETS)!r}") from None
        if not 1 <= buckets <= 1024:
            raise InvalidArgumentError(f"'{BUCKETS}' must be between 1 and 1024, got {buckets}")
        seq = (props.get(SEQUENCE_BY) or "").strip().lower() or None
        partition = [p.strip() for p in _split_transforms(props.get(LAKE_PARTITION) or "") if p.strip()]
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
            m = _TRANSFORM.match(transform)
            if not m:
                raise InvalidArgumentError(f"'{LAKE_PARTITION}': cannot read partition transform {transform!r}")
            args = m.group(2) if m.group(1) else m.group(3)
            column = args.split(",")[-1].strip().lower()
            if column not in names:
                raise InvalidArgumentError(f"'{LAKE_PARTITION}': {column!r} is not a column of the table")
        if CHANGE_TYPE in names and not self.primary_key:
            raise InvalidArgumentError(f"column {CHANGE_TYPE} is reserved for primary-key tables")


def quality_mode(value: str | None) -> str:
    """The data-quality mode of a table: off (default), warn or block (DESIGN §9)."""
    mode = (value or "off").strip().lower()
    if mode not in QUALITY_MODES:
        raise InvalidArgumentError(f"'{QUALITY}' must be one of {', '.join(QUALITY_MODES)}; got {value!r}")
    return mode


def partition_sql(transform: str) -> str:
    """A validated transform rebuilt with a quoted column: ``days(ts)`` → ``days(`ts`)``."""
    from tierlake import sql

    m = _TRANSFORM.match(transform)
    if not m:
        raise InvalidArgumentError(f"'{LAKE_PARTITION}': cannot read partition transform {transform!r}")
    if m.group(3):
        return sql.quote_ident(m.group(3).lower())
    name, args = m.group(1).lower(), [a.strip() for a in m.group(2).split(",")]
    column = sql.quote_ident(args[-1].lower())
    if name in ("bucket", "truncate"):
        if len(args) != 2 or not args[0].isdigit():
            raise InvalidArgumentError(f"'{LAKE_PARTITION}': {name} needs (number, column), got {transform!r}")
        return f"{name}({int(args[0])}, {column})"
    if len(args) != 1:
        raise InvalidArgumentError(f"'{LAKE_PARTITION}': {name} takes one column, got {transform!r}")
    return column if name == "identity" else f"{name}({column})"


def _split_transforms(text: str) -> list[str]:
    """'days(ts), bucket(4, id)' → ['days(ts)', 'bucket(4, id)'] (commas inside parentheses kept)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


def data_columns(columns: list[Column]) -> list[Column]:
    """The columns the lake table carries (no change-type bookkeeping)."""
    return [c for c in columns if c.name.lower() != CHANGE_TYPE]
