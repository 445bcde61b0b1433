"""A log table's chunk tiered without a Spark job: the data files its
appends added are copied into the lake table and appended to the round's
branch in one commit (``io.tierlake.internal.LakeFiles``, compiled by
server/runtime/javaext.py). The same class lists a primary-key chunk's data
files for its MERGE (:func:`listed_files`).

A Spark ``INSERT … SELECT`` decodes and re-encodes every row, and even a
one-row round pays for a Spark job (~0.15 s); a copy moves bytes. It is
used when a stream file is also a valid lake file (``LakeFiles.blocker``):
both tables unpartitioned (and so every file the chunk's appends added),
the lake unsorted, the same columns with the same field ids (names, types,
nullability), the lake's last column id at least the stream's, no name
mapping on the stream, format version 2; and the chunk is at most
:data:`COPY_MAX_BYTES`. That is what a tiered table has until a
partitioned lake (``table.datalake.partition``), a sort order or a schema
change the lake carries differently says otherwise; then the round writes
through Spark (:class:`~tierlake.server.changelog.lake_write.ChangelogWrite`)
as before. The rows are the same either way; only the lake's file layout
differs (a copy keeps the stream's files, which managed compaction merges).
"""

from __future__ import annotations

import logging
from typing import Any

from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.jvm import LAKE_FILES
from tierlake.server.changelog.planner import Chunk
from tierlake.server.runtime.jvm import jclass

log = logging.getLogger("tierlake.tiering")

# Above this many bytes a chunk is written through Spark: a copy moves the bytes through the
# driver one file at a time, Spark's tasks read and write in parallel (it matters on object stores).
COPY_MAX_BYTES = 512 * 1024 * 1024

_missing: list[bool] = []  # set once the class is known to be missing from the driver's class path
_told: set[tuple[str, str]] = set()  # (lake, reason) already logged


def lake_files_class(spark: Any) -> Any | None:
    """``io.tierlake.internal.LakeFiles`` on the driver, or None when it is missing (built without Iceberg's
    jar, server/runtime/javaext.py): callers then go through Spark."""
    from py4j.java_gateway import JavaClass

    if _missing:
        return None
    found = None
    try:
        found = jclass(LAKE_FILES, spark.sparkContext._jvm)
    except Exception:  # noqa: BLE001 - py4j: no such class or package
        pass
    # py4j answers a class it cannot find with a JavaPackage, not an error.
    if not isinstance(found, JavaClass):
        log.info("log rounds write through Spark (tierlake's LakeFiles class is missing)")
        _missing.append(True)
        return None
    return found


def blocker(handle: TableHandle, chunk: Chunk) -> str | None:
    """Why the data files ``chunk``'s appends added cannot be copied into the handle's lake as they are;
    None when they can."""
    if not chunk.snapshot_ids:
        return "no stream commits"
    size = sum(c.bytes for c in chunk.commits)
    if size > COPY_MAX_BYTES:
        return f"the chunk's {size} bytes are more than {COPY_MAX_BYTES} (Spark writes them in parallel)"
    files = lake_files_class(handle.spark)
    if files is None:
        return "tierlake's LakeFiles class is missing"
    reason = files.blocker(handle.stream_table, handle.lake_table, snapshot_id_list(chunk))
    return None if reason is None else str(reason)


def usable(handle: TableHandle, chunk: Chunk) -> bool:
    """Whether a log round may copy ``chunk``'s files (each table's reason to not is logged once)."""
    reason = blocker(handle, chunk)
    if reason is None:
        return True
    key = (str(handle.lake), reason)
    if key not in _told and not reason.startswith("the chunk's"):
        _told.add(key)
        log.info("rounds of %s write through Spark: %s", key[0], reason)
    return False


def append(handle: TableHandle, chunk: Chunk, branch: str, properties: dict[str, str]) -> None:
    """Tier ``chunk`` (appends of a log table) into ``branch`` of the handle's lake in one commit, by
    copying the data files its commits added (checked with :func:`usable` first)."""
    jclass(LAKE_FILES, handle.spark.sparkContext._jvm).appendCopies(
        handle.stream_table, handle.lake_table, snapshot_id_list(chunk), branch, properties)


def listed_files(spark: Any, stream_table: Any, chunk: Chunk, bucket_field: str | None) -> Any | None:
    """The data files holding ``chunk``'s rows, read from the stream's manifests on the driver
    (``LakeFiles.chunkFiles``: a local relation, no Spark job); None when the class is missing."""
    files = lake_files_class(spark)
    if files is None:
        return None
    from pyspark.sql import DataFrame

    ids = snapshot_id_list(chunk) if chunk.rewritten else None
    return DataFrame(files.chunkFiles(spark._jsparkSession, stream_table, chunk.end_snapshot_id,
                                      chunk.start_position, chunk.end_position, ids, bucket_field), spark)


def snapshot_id_list(chunk: Chunk) -> str:
    """``chunk``'s append snapshot ids as LakeFiles takes them (comma-separated)."""
    return ",".join(str(i) for i in chunk.snapshot_ids)
