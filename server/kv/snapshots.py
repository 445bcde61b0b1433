"""KV snapshots of primary-key stream tables (docs/design.md, 'KV snapshots').

A KV snapshot is the key→row state of a stream table at a log position. It
is kept as one Iceberg snapshot of the table's companion **KV table**
(:mod:`tierlake.server.kv.snapshot_catalog`), bucketed like the stream table. The KV
snapshot id *is* that Iceberg snapshot id; one snapshot covers every bucket,
so a lease on ``bucket → id`` names the same id for each bucket. The
snapshot's summary records the stream position (``tierlake.kv.log-position``)
and the stream snapshot at it.

Each new snapshot applies the changelog since the previous one through the
lake-write path a tiering round uses (:mod:`tierlake.server.changelog.lake_write`),
so its cost is the delta, not the table. Retention is :mod:`tierlake.server.kv.retention`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.columns import table_columns
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.catalog.tiered_tables import create_lake_table
from tierlake.server.changelog import lake_write
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.planner import range_chunk, summary
from tierlake.server.exceptions import InvalidArgumentError, NoSuchTableError, TieringGuardError
from tierlake.server.kv.snapshot_catalog import (
    KV_OF_PROPERTY,
    KV_POSITION,
    KV_STREAM_SNAPSHOT,
    KV_TABLE_PROPERTY,
    LOG_START_PROPERTY,
    NEVER_MS,
    KvCatalog,
    KvSnapshot,
    kv_table_name,
    kv_table_of,
    require_primary_key,
    table_lock,
)
from tierlake.server.runtime import iceberg_actions as im
from tierlake.server.runtime.jvm import string_map

log = logging.getLogger("tierlake.kv")

VIEW_PREFIX = "__tierlake_kv"

__all__ = ["VIEW_PREFIX", "compact_kv_table", "take_snapshot", "take_snapshot_of"]
# A KV table is compacted once it has this many data files or any delete
# file: each snapshot's MERGE adds up to a file and a delete file per bucket.
KV_COMPACT_MIN_FILES = 5


def _ensure_kv_table(spark: Any, stream: TablePath, props: dict[str, str], spec: TieredSpec) -> TablePath:
    kv = kv_table_of(props)
    if kv is not None and spark.catalog.tableExists(kv.quoted):
        return kv
    kv = kv or kv_table_name(stream)
    columns = table_columns(spark, stream)
    create_lake_table(spark, stream, kv, columns, TieredSpec(spec.primary_key, spec.buckets, spec.sequence_by, []))
    load_table(spark, kv).updateProperties().set("history.expire.max-snapshot-age-ms", NEVER_MS) \
        .set(KV_OF_PROPERTY, str(stream)).commit()
    load_table(spark, stream).updateProperties().set(KV_TABLE_PROPERTY, str(kv)).commit()
    log.info("created KV table %s for %s", kv, stream)
    return kv


def _newest_in_kv_table(spark: Any, kv: TablePath) -> tuple[int, int | None, Any]:
    """``(log position, stream snapshot id, Iceberg snapshot)`` of the KV table's current state."""
    current = load_table(spark, kv).currentSnapshot()
    if current is None:
        return 0, None, None
    s = summary(current)
    if KV_POSITION not in s:
        raise TieringGuardError(f"KV table {kv} was changed outside tierlake (its current snapshot "
                                f"{current.snapshotId()} carries no {KV_POSITION})")
    return int(s[KV_POSITION]), int(s[KV_STREAM_SNAPSHOT]), current


def take_snapshot(spark: Any, stream: TablePath, catalog: KvCatalog | None = None) -> tuple[KvSnapshot, bool]:
    """:func:`take_snapshot_of` for a caller that holds no handle of the table (``sys.kv_snapshot``,
    periodic KV maintenance)."""
    if not spark.catalog.tableExists(stream.quoted):
        raise NoSuchTableError(f"table {stream} does not exist")
    return take_snapshot_of(TableHandle.of(spark, None, stream), catalog)


def take_snapshot_of(handle: TableHandle, catalog: KvCatalog | None = None) -> tuple[KvSnapshot, bool]:
    """A KV snapshot of the handle's table at its stream's current end: ``(snapshot, created)``.

    Nothing new since the newest snapshot → that one, ``created = False``.
    The handle's stream table is the one read, refreshed (a round's maintenance passes the round's).
    """
    spark, stream = handle.spark, handle.stream
    catalog = catalog or KvCatalog(spark)
    with table_lock(stream):
        stream_table = handle.fresh_stream()
        props = string_map(stream_table.properties())
        spec = require_primary_key(stream, props)
        head = stream_table.currentSnapshot()
        if head is None:
            raise InvalidArgumentError(f"stream table {stream} has no commits yet: there is no state to snapshot")
        end, head_id = int(head.sequenceNumber()), int(head.snapshotId())
        kv = _ensure_kv_table(spark, stream, props, spec)
        start, start_id, current = _newest_in_kv_table(spark, kv)
        if current is not None and start >= end:
            snap = KvSnapshot(stream.database, stream.table, str(kv), int(current.snapshotId()), start,
                              start_id, datetime.fromtimestamp(current.timestampMillis() / 1000, timezone.utc))
            catalog.add(snap)  # idempotent; repairs a catalog row lost to a crash
            return snap, False
        if start < P.read(props, P.LOG_START_PROPERTY):
            raise TieringGuardError(
                f"the changelog of {stream} before position {props[LOG_START_PROPERTY]} was removed by log "
                f"retention and the KV table {kv} does not reach it: the state cannot be rebuilt")
        # The changelog goes into the KV table the way a round writes it into the lake.
        into_kv = TableHandle.loaded(spark, stream, kv, stream_table, config=handle.config)
        columns = lake_write.sync_lake_schema(into_kv)
        changes = range_chunk(stream_table, start_id, start, head)
        props_out = {KV_POSITION: str(end), KV_STREAM_SNAPSHOT: str(head_id), P.COMMIT_USER: lake_write.COMMIT_USER}
        before = None if current is None else int(current.snapshotId())
        with lake_write.ChangelogWrite(into_kv, [kv.database, kv.table], changes, columns,
                                       view_prefix=VIEW_PREFIX) as write:
            write.commit(props_out)
        new = into_kv.fresh_lake().currentSnapshot()
        if new is None or int(new.snapshotId()) == before:
            # The delta changed no row (only -U rows, say): an empty commit
            # still records the position.
            lake_write.append_empty(into_kv.lake_table, props_out)
            new = into_kv.lake_table.currentSnapshot()
        snap = KvSnapshot(stream.database, stream.table, str(kv), int(new.snapshotId()), end, head_id,
                          datetime.fromtimestamp(new.timestampMillis() / 1000, timezone.utc))
        catalog.add(snap)
        log.info("KV snapshot %d of %s at log position %d", snap.snapshot_id, stream, end)
        return snap, True


def compact_kv_table(spark: Any, stream: TablePath, kv: TablePath,
                     catalog: KvCatalog | None = None) -> tuple[int, int] | None:
    """Compact the stream's KV table when it has :data:`KV_COMPACT_MIN_FILES`
    data files or any delete file: ``(files rewritten, files added)``, or
    None when nothing was due. The ``replace`` commit carries the KV
    position of the snapshot it compacted and is registered as a KV snapshot
    at that position (same rows, fewer files), so retention expires the
    compacted one like any other and the next snapshot starts from it."""
    catalog = catalog or KvCatalog(spark)
    with table_lock(stream):
        if not spark.catalog.tableExists(kv.quoted):
            return None
        kv_table = load_table(spark, kv)
        files, deletes = im.data_file_counts(kv_table)
        if files < KV_COMPACT_MIN_FILES and not deletes:
            return None
        position, stream_snapshot, current = _newest_in_kv_table(spark, kv)
        carried = {KV_POSITION: str(position), KV_STREAM_SNAPSHOT: str(stream_snapshot), P.MAINTENANCE: "compaction",
                   P.COMMIT_USER: lake_write.COMMIT_USER}
        done = im.compact(spark, kv_table, {
            "min-input-files": "2", "delete-file-threshold": "1", "remove-dangling-deletes": "true",
            "use-starting-sequence-number": "false"}, carried)  # every delete file dangles after (table_maintenance)
        kv_table.refresh()  # committed by Spark's action
        new = kv_table.currentSnapshot()
        if new is not None and KV_POSITION not in summary(new):
            # Iceberg removes the dangling delete files in a commit of its own, without the
            # rewrite's summary: the KV table's current snapshot must name its position.
            lake_write.append_empty(kv_table, carried)
            new = kv_table.currentSnapshot()
        if new is not None and int(new.snapshotId()) != int(current.snapshotId()):
            catalog.add(KvSnapshot(stream.database, stream.table, str(kv), int(new.snapshotId()), position,
                                   stream_snapshot, datetime.fromtimestamp(new.timestampMillis() / 1000,
                                                                           timezone.utc)))
        return done.files_rewritten, done.files_added
