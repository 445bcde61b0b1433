"""A table's columns and bucket field, as tiering and KV snapshots need them."""

from __future__ import annotations

import json
from typing import Any

from tierlake.server.catalog.spec import Column, data_columns
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.runtime.jvm import jclass


def columns_of(schema: Any) -> list[Column]:
    """A Spark schema's columns, typed with Spark SQL type text (:func:`type_text`)."""
    return [Column(f.name, type_text(f.dataType)) for f in schema.fields]


def type_text(data_type: Any) -> str:
    """Spark SQL type text of a Spark data type, as ``simpleString()`` writes it but with a STRUCT field
    name back-quoted where it is not a plain identifier: ``simpleString()`` leaves ``struct<select:double>``
    unquoted, which a DDL statement cannot parse (a tiered CTAS whose query has such a field failed)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return "struct<" + ",".join(f"{_field_name(f.name)}:{type_text(f.dataType)}" for f in data_type.fields) + ">"
    if isinstance(data_type, ArrayType):
        return f"array<{type_text(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"map<{type_text(data_type.keyType)},{type_text(data_type.valueType)}>"
    return data_type.simpleString()


def _field_name(name: str) -> str:
    import sqlglot
    from sqlglot.tokens import TokenType

    try:
        tokens = sqlglot.tokenize(name, read="spark")
    except Exception:  # noqa: BLE001 - not a token at all: quoted
        tokens = []
    if len(tokens) == 1 and tokens[0].token_type == TokenType.VAR and tokens[0].text == name:
        return name
    return "`" + name.replace("`", "``") + "`"


def struct_fields(data_type: Any) -> list[str]:
    """The STRUCT field names, at any depth, inside a Spark data type (arrays and maps included)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return [n for f in data_type.fields for n in [f.name, *struct_fields(f.dataType)]]
    if isinstance(data_type, ArrayType):
        return struct_fields(data_type.elementType)
    if isinstance(data_type, MapType):
        return struct_fields(data_type.keyType) + struct_fields(data_type.valueType)
    return []


def schema_columns(spark: Any, schema: Any) -> list[Column]:
    """An Iceberg ``Schema``'s columns typed as Spark reads them (Iceberg's own conversion, which its
    Spark tables use): the columns of a loaded table without resolving it through Spark again."""
    from pyspark.sql.types import StructType

    struct = jclass("org.apache.iceberg.spark.SparkSchemaUtil", spark.sparkContext._jvm).convert(schema)
    return columns_of(StructType.fromJson(json.loads(struct.json())))


def table_columns(spark: Any, table: TablePath) -> list[Column]:
    return columns_of(spark.table(table.quoted).schema)


def lake_columns(spark: Any, stream: TablePath) -> list[Column]:
    """The stream table's columns a lake (or KV) table carries."""
    return data_columns(table_columns(spark, stream))


def bucket_field(table: Any) -> str | None:
    """The partition field of ``table``'s ``bucket(…)`` transform (an Iceberg ``Table``; primary-key
    stream tables have one)."""
    return next((str(f.name()) for f in table.spec().fields()
                 if str(f.transform().toString()).startswith("bucket")), None)
