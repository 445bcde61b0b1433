"""Spark SQL type text of a schema's columns (server/catalog/columns.py), without a JVM."""

from __future__ import annotations

import pytest
import sqlglot
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DecimalType,
    DoubleType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
)

from tierlake.server.catalog.columns import columns_of, type_text
from tierlake.server.catalog.spec import struct_field_names


def struct(*fields) -> StructType:
    return StructType([StructField(n, t) for n, t in fields])


@pytest.mark.parametrize("data_type, expected", [
    (IntegerType(), "int"),
    (DecimalType(38, 2), "decimal(38,2)"),
    (struct(("order", TimestampNTZType()), ("k", BinaryType())), "struct<order:timestamp_ntz,k:binary>"),
    (struct(("select", DoubleType())), "struct<`select`:double>"),
    (ArrayType(struct(("from", IntegerType()), ("x", IntegerType()))), "array<struct<`from`:int,x:int>>"),
    (MapType(StringType(), struct(("a`b", DecimalType(10, 2)))), "map<string,struct<`a``b`:decimal(10,2)>>"),
    (struct(("date", IntegerType()), ("values", struct(("int", IntegerType())))),
     "struct<`date`:int,`values`:struct<`int`:int>>"),
])
def test_type_text_quotes_field_names_that_are_not_plain_identifiers(data_type, expected):
    """``simpleString()`` wrote ``struct<select:double>``, which a CREATE cannot parse (a tiered CTAS whose
    query had such a field was refused); plain names are written as ``simpleString()`` writes them."""
    assert type_text(data_type) == expected
    if "`" not in expected:
        assert expected == data_type.simpleString()


def test_column_types_parse_in_a_create_and_keep_their_field_names():
    inner = struct(("select", DoubleType()), ("from", ArrayType(struct(("int", IntegerType())))))
    schema = struct(("s", inner), ("id", IntegerType()))
    columns = columns_of(schema)
    text = "CREATE TABLE t (" + ", ".join(f"`{c.name}` {c.type}" for c in columns) + ")"
    assert sqlglot.parse_one(text, read="spark") is not None
    assert struct_field_names(columns[0].type) == ["select", "from", "int"]
