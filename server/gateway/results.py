"""Turning a :class:`LocalResult` into HiveServer2 result-set structures.

The mapping copies what Spark's Thrift Server does (``RowSetUtils`` and
``SparkExecuteStatementOperation.toTTypeId``) so that clients cannot tell a
gateway-answered statement from a relayed one: numeric and boolean columns use
their typed Thrift columns, everything else (timestamp, date, decimal and the
complex types, whose TTypeDesc is a *primitive* entry with ARRAY/MAP/STRUCT
type id, as Spark sends it) travels as strings.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import functools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from TCLIService import ttypes

T = ttypes.TTypeId
V6 = ttypes.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V6


class ColumnType(NamedTuple):
    """How one Spark type string is described and encoded on the wire."""

    type_id: int
    attr: str                      # TColumn / TColumnValue field name
    convert: Callable[[Any], Any]  # Python value -> wire value (never None)
    placeholder: Any               # wire value stored in null slots
    qualifiers: Any = None         # TTypeQualifiers (decimal precision/scale)


def render_timestamp(value: Any) -> str:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` with trailing zeros trimmed, as
    Spark's STS renders timestamps. Naive values are shown as they are, aware
    ones in UTC, the session time zone tierlake runs Spark with."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
                f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    if isinstance(value, _dt.date):
        return render_timestamp(_dt.datetime(value.year, value.month, value.day))
    return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return render_timestamp(value)
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"cannot render {type(value).__name__!r} as JSON")


def render_json(value: Any) -> str:
    """Complex values: pre-rendered strings pass through, anything else is
    rendered compactly like Spark (``["a","b"]``, ``{"k":1}``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (_dt.datetime, _dt.date)):
        return render_timestamp(value) if isinstance(value, _dt.datetime) else value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return render_json(value)
    return str(value)


def _to_date(value: Any) -> str:
    if isinstance(value, _dt.datetime):
        return value.date().isoformat()
    if isinstance(value, _dt.date):
        return value.isoformat()
    return str(value)


def _to_decimal(value: Any) -> str:
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def _to_binary(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _to_timestamp(value: Any) -> str:
    return render_timestamp(value) if isinstance(value, (_dt.date, _dt.datetime)) else str(value)


_STRING = ColumnType(T.STRING_TYPE, "stringVal", _to_str, "")
_SIMPLE = {
    "string": _STRING,
    "bigint": ColumnType(T.BIGINT_TYPE, "i64Val", int, 0),
    "int": ColumnType(T.INT_TYPE, "i32Val", int, 0),
    "smallint": ColumnType(T.SMALLINT_TYPE, "i16Val", int, 0),
    "tinyint": ColumnType(T.TINYINT_TYPE, "byteVal", int, 0),
    "double": ColumnType(T.DOUBLE_TYPE, "doubleVal", float, 0.0),
    "float": ColumnType(T.FLOAT_TYPE, "doubleVal", float, 0.0),
    "boolean": ColumnType(T.BOOLEAN_TYPE, "boolVal", bool, False),
    "timestamp": ColumnType(T.TIMESTAMP_TYPE, "stringVal", _to_timestamp, ""),
    "date": ColumnType(T.DATE_TYPE, "stringVal", _to_date, ""),
    "binary": ColumnType(T.BINARY_TYPE, "binaryVal", _to_binary, b""),
    "void": ColumnType(T.NULL_TYPE, "stringVal", _to_str, ""),
}
_ALIASES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint",
            "real": "float", "bool": "boolean", "timestamp_ntz": "timestamp",
            "timestamp_ltz": "timestamp", "null": "void"}
_COMPLEX = {"array": T.ARRAY_TYPE, "map": T.MAP_TYPE, "struct": T.STRUCT_TYPE}
_DECIMAL = re.compile(r"^(?:decimal|dec|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")
_CHAR = re.compile(r"^(?:var)?char\s*\(\s*\d+\s*\)$")


@functools.lru_cache(maxsize=512)
def column_type(spark_type: str) -> ColumnType:
    """Parse a Spark type string; raise ValueError for unsupported types."""
    text = spark_type.strip().lower()
    text = _ALIASES.get(text, text)
    if text in _SIMPLE:
        return _SIMPLE[text]
    if _CHAR.match(text):
        return _STRING  # Spark's STS reports char/varchar as plain strings
    head = text.split("<", 1)[0].strip()
    if head in _COMPLEX and text.endswith(">"):
        return ColumnType(_COMPLEX[head], "stringVal", render_json, "")
    match = _DECIMAL.match(text)
    if match:
        precision = int(match.group(1) or 10)
        scale = int(match.group(2) or 0)
        qualifiers = ttypes.TTypeQualifiers(qualifiers={
            "precision": ttypes.TTypeQualifierValue(i32Value=precision),
            "scale": ttypes.TTypeQualifierValue(i32Value=scale)})
        return ColumnType(T.DECIMAL_TYPE, "stringVal", _to_decimal, "", qualifiers)
    raise ValueError(f"unsupported column type {spark_type!r}")


def parse_columns(columns: Sequence[tuple[str, str]]) -> list[ColumnType]:
    return [column_type(spark_type) for _, spark_type in columns]


def table_schema(columns: Sequence[tuple[str, str]]) -> ttypes.TTableSchema:
    """The TTableSchema answering GetResultSetMetadata."""
    descs = []
    # 0-based positions and an empty qualifier map, exactly as Spark sends them.
    for position, ((name, _), ctype) in enumerate(zip(columns, parse_columns(columns), strict=False)):
        qualifiers = ctype.qualifiers or ttypes.TTypeQualifiers(qualifiers={})
        entry = ttypes.TPrimitiveTypeEntry(type=ctype.type_id, typeQualifiers=qualifiers)
        descs.append(ttypes.TColumnDesc(
            columnName=name, position=position, comment="",
            typeDesc=ttypes.TTypeDesc(types=[ttypes.TTypeEntry(primitiveEntry=entry)])))
    return ttypes.TTableSchema(columns=descs)


def null_bitmap(nulls: Sequence[bool]) -> bytes:
    """Hive's BitSet encoding: bit i%8 of byte i//8 (LSB first), trimmed after
    the last null; PyHive indexes rows by every set bit, so no stray bits."""
    last = max((i for i, is_null in enumerate(nulls) if is_null), default=-1)
    out = bytearray((last + 8) // 8)
    for i in range(last + 1):
        if nulls[i]:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


_COLUMN_CLASSES = {
    "boolVal": ttypes.TBoolColumn, "byteVal": ttypes.TByteColumn, "i16Val": ttypes.TI16Column,
    "i32Val": ttypes.TI32Column, "i64Val": ttypes.TI64Column, "doubleVal": ttypes.TDoubleColumn,
    "stringVal": ttypes.TStringColumn, "binaryVal": ttypes.TBinaryColumn,
}
_VALUE_CLASSES = {
    "boolVal": ttypes.TBoolValue, "byteVal": ttypes.TByteValue, "i16Val": ttypes.TI16Value,
    "i32Val": ttypes.TI32Value, "i64Val": ttypes.TI64Value, "doubleVal": ttypes.TDoubleValue,
    "stringVal": ttypes.TStringValue,
}


def _check_arity(rows: Sequence[tuple], width: int, start: int) -> None:
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"row {start + i} has {len(row)} values, expected {width}")


def columnar_row_set(columns: Sequence[tuple[str, str]], rows: Sequence[tuple],
                     start_offset: int = 0) -> ttypes.TRowSet:
    """Protocol V6+ result batch: one typed TColumn per column."""
    types = parse_columns(columns)
    _check_arity(rows, len(types), start_offset)
    tcolumns = []
    for index, ctype in enumerate(types):
        values, nulls = [], []
        for row in rows:
            value = row[index]
            if value is None:
                values.append(ctype.placeholder)
                nulls.append(True)
            else:
                values.append(ctype.convert(value))
                nulls.append(False)
        column = _COLUMN_CLASSES[ctype.attr](values=values, nulls=null_bitmap(nulls))
        tcolumns.append(ttypes.TColumn(**{ctype.attr: column}))
    # `rows` is a required field of TRowSet even in columnar form.
    return ttypes.TRowSet(startRowOffset=start_offset, rows=[], columns=tcolumns)


def row_based_row_set(columns: Sequence[tuple[str, str]], rows: Sequence[tuple],
                      start_offset: int = 0) -> ttypes.TRowSet:
    """Pre-V6 result batch: a TRow of TColumnValues per row; NULL is a typed
    value struct whose ``value`` is unset (what Hive's ColumnValue does)."""
    types = parse_columns(columns)
    _check_arity(rows, len(types), start_offset)
    trows = []
    for row in rows:
        values = []
        for ctype, value in zip(types, row, strict=False):
            # Row-based sets have no binary value: Hive sends binary as a string.
            attr = "stringVal" if ctype.attr == "binaryVal" else ctype.attr
            if value is None:
                wire = None
            elif attr != ctype.attr:
                wire = _to_str(value)
            else:
                wire = ctype.convert(value)
            values.append(ttypes.TColumnValue(**{attr: _VALUE_CLASSES[attr](value=wire)}))
        trows.append(ttypes.TRow(colVals=values))
    return ttypes.TRowSet(startRowOffset=start_offset, rows=trows)


def build_row_set(columns: Sequence[tuple[str, str]], rows: Sequence[tuple],
                  start_offset: int, protocol_version: int) -> ttypes.TRowSet:
    """Columnar for protocol >= V6, row-based before (as HiveServer2 decides)."""
    if protocol_version >= V6:
        return columnar_row_set(columns, rows, start_offset)
    return row_based_row_set(columns, rows, start_offset)


def empty_log_row_set(protocol_version: int) -> ttypes.TRowSet:
    """Answer to a log fetch (fetchType=1): one string column, no rows."""
    return build_row_set([("log", "string")], [], 0, protocol_version)
