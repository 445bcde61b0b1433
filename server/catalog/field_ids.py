"""Which stream column each lake (or KV) column carries, by Iceberg field id.

A stream column keeps its field id through ``RENAME COLUMN``; a column
dropped and added again gets a new one. The lake table records
``{stream field id: lake column}`` in its ``tierlake.lake.field-ids``
property (written when it is created, kept current by
:func:`tierlake.server.changelog.lake_schema.sync_lake_schema`), so a rename
is carried to the lake column instead of splitting it in two.
"""

from __future__ import annotations

import json
from typing import Any

from tierlake.server.catalog.properties import LAKE_FIELD_IDS
from tierlake.server.catalog.spec import CHANGE_TYPE
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.runtime.jvm import is_java, jclass


def schema_fields(schema: Any) -> dict[int, str]:
    """An Iceberg ``Schema``'s top-level columns: ``{field id: name}``."""
    if is_java(schema):  # as one JSON text: a round trip, not three per column
        parsed = json.loads(str(jclass("org.apache.iceberg.SchemaParser").toJson(schema)))
        return {int(f["id"]): str(f["name"]) for f in parsed["fields"]}
    return {int(f.fieldId()): str(f.name()) for f in schema.columns()}


def stream_fields(spark: Any, stream: TablePath) -> dict[int, str]:
    """The stream table's data columns now (no ``_change_type``): ``{field id: name}``."""
    return {fid: name for fid, name in schema_fields(load_table(spark, stream).schema()).items()
            if name.lower() != CHANGE_TYPE}


def read(table: Any) -> dict[int, str] | None:
    """The lake (or KV) Iceberg table's recorded mapping; None when it has none (created before it existed)."""
    return decode(read_text(table))


def read_text(table: Any) -> str | None:
    """The recorded mapping as stored (one lookup in the Java map, not a copy of every property)."""
    text = table.properties().get(LAKE_FIELD_IDS)
    return None if text is None else str(text)


def decode(text: str | None) -> dict[int, str] | None:
    if not text:
        return None
    return {int(fid): str(name) for fid, name in json.loads(text).items()}


def encode(mapping: dict[int, str]) -> str:
    return json.dumps({str(fid): name for fid, name in sorted(mapping.items())}, separators=(",", ":"))


def record(spark: Any, stream: TablePath, lake: TablePath, names: list[str], tables: Any = None) -> None:
    """Record a new lake table's columns ``names`` as carrying the stream's same-named columns.

    A stream that does not exist yet (a CTAS stages it under another name)
    records nothing: the first sync maps the columns by name. ``tables``: the
    stream and lake as loaded by the caller (``stream_table``, ``lake_table``:
    a tiered table's handle), not looked up again.
    """
    if tables is None:
        if not spark.catalog.tableExists(stream.quoted):
            return
        stream_table, lake_table = load_table(spark, stream), load_table(spark, lake)
    else:
        stream_table, lake_table = tables.stream_table, tables.lake_table
    wanted = {n.lower(): n for n in names}
    mapping = {fid: wanted[name.lower()] for fid, name in schema_fields(stream_table.schema()).items()
               if name.lower() != CHANGE_TYPE and name.lower() in wanted}
    lake_table.updateProperties().set(LAKE_FIELD_IDS, encode(mapping)).commit()
