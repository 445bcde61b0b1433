"""Result-set encoding: TTableSchema, columnar and row-based TRowSets."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from pyhive.hive import _unwrap_column
from TCLIService import ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.transport.TTransport import TMemoryBuffer

from tierlake.server.gateway.results import (
    build_row_set,
    columnar_row_set,
    empty_log_row_set,
    null_bitmap,
    render_json,
    render_timestamp,
    row_based_row_set,
    table_schema,
)

T = ttypes.TTypeId
V = ttypes.TProtocolVersion

COLUMNS = [("name", "string"), ("n", "bigint"), ("ts", "timestamp"), ("nothing", "string")]
ROWS = [
    ("a", 1, dt.datetime(2024, 1, 2, 3, 4, 5), None),
    (None, 2, dt.datetime(2024, 1, 2, 3, 4, 5, 120000), None),
    ("c", None, None, None),
]


def thrift_round_trip(obj):
    """Encode and decode like the wire does, to catch unencodable values."""
    buf = TMemoryBuffer()
    obj.write(TBinaryProtocol(buf))
    copy = type(obj)()
    copy.read(TBinaryProtocol(TMemoryBuffer(buf.getvalue())))
    return copy


def type_of(desc: ttypes.TColumnDesc) -> int:
    return desc.typeDesc.types[0].primitiveEntry.type


def test_table_schema_types_names_and_positions():
    columns = COLUMNS + [("i", "int"), ("d", "double"), ("b", "boolean"),
                         ("tags", "array<string>"), ("props", "map<string,string>"),
                         ("s", "struct<a:int>"), ("amount", "decimal(12, 3)"), ("day", "date"),
                         ("small", "smallint"), ("tiny", "tinyint"), ("f", "float"),
                         ("v", "varchar(20)"), ("raw", "binary")]
    schema = thrift_round_trip(table_schema(columns))
    assert [c.columnName for c in schema.columns] == [name for name, _ in columns]
    assert [c.position for c in schema.columns] == list(range(len(columns)))
    assert [type_of(c) for c in schema.columns] == [
        T.STRING_TYPE, T.BIGINT_TYPE, T.TIMESTAMP_TYPE, T.STRING_TYPE, T.INT_TYPE, T.DOUBLE_TYPE,
        T.BOOLEAN_TYPE, T.ARRAY_TYPE, T.MAP_TYPE, T.STRUCT_TYPE, T.DECIMAL_TYPE, T.DATE_TYPE,
        T.SMALLINT_TYPE, T.TINYINT_TYPE, T.FLOAT_TYPE, T.STRING_TYPE, T.BINARY_TYPE]
    decimal_entry = schema.columns[10].typeDesc.types[0].primitiveEntry
    qualifiers = decimal_entry.typeQualifiers.qualifiers
    assert (qualifiers["precision"].i32Value, qualifiers["scale"].i32Value) == (12, 3)


def test_type_strings_are_case_and_alias_insensitive():
    schema = table_schema([("a", " BIGINT "), ("b", "Long"), ("c", "TIMESTAMP_NTZ"),
                           ("d", "ARRAY<INT>")])
    assert [type_of(c) for c in schema.columns] == [
        T.BIGINT_TYPE, T.BIGINT_TYPE, T.TIMESTAMP_TYPE, T.ARRAY_TYPE]


@pytest.mark.parametrize("bad", ["interval", "geometry", "array<string", "decimal(x)"])
def test_unsupported_type_is_rejected(bad):
    with pytest.raises(ValueError, match="unsupported column type"):
        table_schema([("x", bad)])


def test_null_bitmap_is_lsb_first_and_trimmed():
    assert null_bitmap([False, False]) == b""
    assert null_bitmap([True]) == b"\x01"
    assert null_bitmap([False, True, False]) == b"\x02"
    nulls = [False] * 10
    nulls[0] = nulls[9] = True
    assert null_bitmap(nulls) == b"\x01\x02"
    assert null_bitmap([True] * 8 + [False] * 20) == b"\xff"


def test_columnar_row_set_values_placeholders_and_nulls():
    row_set = thrift_round_trip(columnar_row_set(COLUMNS, ROWS, start_offset=7))
    assert row_set.startRowOffset == 7
    assert row_set.rows == []
    name, n, ts, nothing = row_set.columns
    assert name.stringVal.values == ["a", "", "c"]
    assert name.stringVal.nulls == b"\x02"
    assert n.i64Val.values == [1, 2, 0]
    assert n.i64Val.nulls == b"\x04"
    assert ts.stringVal.values == ["2024-01-02 03:04:05", "2024-01-02 03:04:05.12", ""]
    assert ts.stringVal.nulls == b"\x04"
    assert nothing.stringVal.values == ["", "", ""]
    assert nothing.stringVal.nulls == b"\x07"


def test_pyhive_decodes_our_columns():
    row_set = thrift_round_trip(columnar_row_set(COLUMNS, ROWS))
    decoded = [_unwrap_column(col, type_name) for col, type_name in
               zip(row_set.columns, ["STRING_TYPE", "BIGINT_TYPE", "TIMESTAMP_TYPE", "STRING_TYPE"], strict=False)]
    assert list(zip(*decoded, strict=False)) == ROWS


def test_typed_columns_cover_every_simple_type():
    columns = [("i", "int"), ("d", "double"), ("b", "boolean"), ("s", "smallint"),
               ("t", "tinyint"), ("f", "float"), ("raw", "binary"), ("day", "date"),
               ("amount", "decimal(10,2)"), ("tags", "array<string>"), ("m", "map<string,int>")]
    rows = [(1, 1.5, True, 2, 3, 0.25, b"\x00\xff", dt.date(2024, 2, 29),
             decimal.Decimal("12.50"), ["x", "y"], '{"k":1}'),
            (None, None, None, None, None, None, None, None, None, None, None)]
    cols = thrift_round_trip(columnar_row_set(columns, rows)).columns
    assert cols[0].i32Val.values == [1, 0] and cols[0].i32Val.nulls == b"\x02"
    assert cols[1].doubleVal.values == [1.5, 0.0]
    assert cols[2].boolVal.values == [True, False]
    assert cols[3].i16Val.values == [2, 0]
    assert cols[4].byteVal.values == [3, 0]
    assert cols[5].doubleVal.values == [0.25, 0.0]
    assert cols[6].binaryVal.values == [b"\x00\xff", b""]
    assert cols[7].stringVal.values == ["2024-02-29", ""]
    assert cols[8].stringVal.values == ["12.50", ""]
    assert cols[9].stringVal.values == ['["x","y"]', ""]
    assert cols[10].stringVal.values == ['{"k":1}', ""]  # pre-rendered JSON passes through
    assert all(col.__dict__[attr].nulls == b"\x02" for col, attr in zip(cols, [
        "i32Val", "doubleVal", "boolVal", "i16Val", "byteVal", "doubleVal", "binaryVal",
        "stringVal", "stringVal", "stringVal", "stringVal"], strict=False))


def test_empty_columnar_row_set_still_has_one_column_per_field():
    row_set = thrift_round_trip(columnar_row_set(COLUMNS, [], start_offset=3))
    assert len(row_set.columns) == 4
    assert row_set.columns[1].i64Val.values == []
    assert row_set.columns[1].i64Val.nulls == b""


def test_row_based_row_set_for_old_protocols():
    row_set = thrift_round_trip(row_based_row_set(COLUMNS, ROWS, start_offset=2))
    assert row_set.startRowOffset == 2
    assert row_set.columns is None
    first, second, third = row_set.rows
    assert [first.colVals[0].stringVal.value, first.colVals[1].i64Val.value,
            first.colVals[2].stringVal.value] == ["a", 1, "2024-01-02 03:04:05"]
    assert second.colVals[0].stringVal is not None
    assert second.colVals[0].stringVal.value is None  # NULL: a typed value with no value
    assert second.colVals[2].stringVal.value == "2024-01-02 03:04:05.12"
    assert third.colVals[1].i64Val is not None and third.colVals[1].i64Val.value is None
    assert third.colVals[3].stringVal.value is None


def test_build_row_set_picks_the_format_by_protocol_version():
    columnar = build_row_set(COLUMNS, ROWS, 0, V.HIVE_CLI_SERVICE_PROTOCOL_V6)
    assert columnar.columns and columnar.rows == []
    newest = build_row_set(COLUMNS, ROWS, 0, V.HIVE_CLI_SERVICE_PROTOCOL_V10)
    assert newest.columns
    old = build_row_set(COLUMNS, ROWS, 0, V.HIVE_CLI_SERVICE_PROTOCOL_V5)
    assert old.columns is None and len(old.rows) == 3


def test_log_row_set_is_empty():
    log = thrift_round_trip(empty_log_row_set(V.HIVE_CLI_SERVICE_PROTOCOL_V10))
    assert log.columns[0].stringVal.values == []
    assert empty_log_row_set(V.HIVE_CLI_SERVICE_PROTOCOL_V1).rows == []


def test_row_arity_is_checked():
    with pytest.raises(ValueError, match="row 5 has 2 values, expected 4"):
        columnar_row_set(COLUMNS, [("a", 1)], start_offset=5)


@pytest.mark.parametrize("value, text", [
    (dt.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02 03:04:05"),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 1), "2024-01-02 03:04:05.000001"),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 500000), "2024-01-02 03:04:05.5"),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 123456), "2024-01-02 03:04:05.123456"),
    (dt.datetime(5, 6, 7, 8, 9, 10), "0005-06-07 08:09:10"),
    (dt.datetime(2024, 1, 2, 5, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
     "2024-01-02 03:04:05"),
    (dt.date(2024, 3, 1), "2024-03-01 00:00:00"),
    ("2024-01-01 00:00:00", "2024-01-01 00:00:00"),
])
def test_render_timestamp(value, text):
    assert render_timestamp(value) == text


def test_render_json_is_compact_like_spark():
    assert render_json(["a", "b"]) == '["a","b"]'
    assert render_json({"k": [1, None], "t": dt.datetime(2024, 1, 1, 0, 0, 0, 250000)}) == \
        '{"k":[1,null],"t":"2024-01-01 00:00:00.25"}'
    assert render_json("[1,2]") == "[1,2]"
    assert render_json({"é": decimal.Decimal("1.5")}) == '{"é":1.5}'
