"""``DROP TABLE t`` and then a tiered ``CREATE TABLE t``: the lake table the
old ``t`` was tiered into is still there (a DROP keeps the lake rows), and it
records which stream table its rows came from. A new ``t`` tiered into it
would fail its first round (:class:`StreamReplacedError`), so the CREATE is
refused before anything is made, saying what it found and the two ways out.

A lake table that was never tiered into (no recorded stream or position) is
used as it is.
"""

from __future__ import annotations

from typing import Any

from tierlake.server.catalog.properties import LAKE_STREAM_UUID, LAKE_TIERED_POSITION
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.catalog.tiered_tables import lake_path
from tierlake.server.exceptions import TableExistsError
from tierlake.server.runtime.jvm import string_map


def refuse_leftover_lake(spark: Any, config: Any, stream: TablePath, stream_exists: bool | None = None) -> bool:
    """Raise :class:`TableExistsError` when ``stream`` does not exist but its lake
    table does and holds rows tiered from an earlier stream table of that name.
    Whether the lake table exists (False when the stream does: not looked at);
    ``stream_exists``: the caller looked the stream up already."""
    if spark.catalog.tableExists(stream.quoted) if stream_exists is None else stream_exists:
        return False  # its own lake table; the CREATE answers "already exists" (or IF NOT EXISTS)
    lake = lake_path(config, stream)
    if not spark.catalog.tableExists(lake.quoted):
        return False
    try:
        properties = string_map(load_table(spark, lake).properties())
    except Exception:  # noqa: BLE001 - not an Iceberg table: creating the lake table says so
        return True
    uuid, position = properties.get(LAKE_STREAM_UUID), properties.get(LAKE_TIERED_POSITION)
    if not uuid and position is None:
        return True
    came_from = ", ".join(part for part in (f"stream table UUID {uuid}" if uuid else "",
                                            f"tiered up to stream position {position}" if position else "") if part)
    raise TableExistsError(
        f"CREATE TABLE {stream}: its lake table {lake} already exists and holds the rows of an earlier stream "
        f"table {stream} ({came_from}); a new {stream} cannot be tiered into it (its first round would fail: "
        f"the stream table was replaced). Nothing was created. Keep those rows under another name "
        f"(ALTER TABLE {lake} RENAME TO {lake.database}.<another name>) or drop them (DROP TABLE {lake}), "
        "then run the CREATE again")
