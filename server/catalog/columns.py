"""A table's columns and bucket field, as tiering and KV snapshots need them."""

from __future__ import annotations

from typing import Any

from tierlake.server.catalog.spec import Column, data_columns
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.runtime.session import iceberg_table


def columns_of(schema: Any) -> list[Column]:
    """A Spark schema's columns, typed with Spark SQL type text."""
    return [Column(f.name, f.dataType.simpleString()) for f in schema.fields]


def table_columns(spark: Any, table: TablePath) -> list[Column]:
    return columns_of(spark.table(table.quoted).schema)


def lake_columns(spark: Any, stream: TablePath) -> list[Column]:
    """The stream table's columns a lake (or KV) table carries."""
    return data_columns(table_columns(spark, stream))


def bucket_field(spark: Any, table: TablePath) -> str | None:
    """The partition field of the table's ``bucket(…)`` transform (primary-key stream tables have one)."""
    return next((str(f.name()) for f in iceberg_table(spark, table.quoted).spec().fields()
                 if str(f.transform().toString()).startswith("bucket")), None)
