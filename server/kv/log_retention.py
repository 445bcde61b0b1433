"""Log retention of stream tables (table property ``table.log.ttl``).

Changelog data older than the TTL is removed only up to the *retention
bound*: the position the lake has tiered and, for primary-key tables, the
position of the newest KV snapshot and of every leased one (a round reading a
leased snapshot continues with the log from its position). The removal is
one maintenance commit (summary ``tierlake.maintenance = log-retention``,
which planning skips instead of treating it as a user ``DELETE``), together
with the stream property ``tierlake.log.start-position``: the log is complete
only after it. Stream snapshots before that position are expired, which is
what deletes the files. A lake table whose position is before the log start
is rebuilt from a KV snapshot (:mod:`server.tiering.snapshot_split`). The
table's fresh view is re-pinned first, and the log removed only up to the
position it then reads after (its re-pin runs behind the round).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.properties import LAKE_TABLE_PROPERTY
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.planner import MAINTENANCE, lake_position
from tierlake.server.config.durations import parse_duration
from tierlake.server.kv import snapshot_catalog as kv
from tierlake.server.kv.leases import Leases

log = logging.getLogger("tierlake.kv")

RESULT_COLUMNS = [("table_path", "string"), ("log_start_position", "bigint"), ("removed_files", "bigint"),
                  ("removed_rows", "bigint"), ("expired_snapshots", "bigint")]


@dataclass
class Truncation:
    table_path: str
    log_start_position: int
    removed_files: int = 0
    removed_rows: int = 0
    expired_snapshots: int = 0

    def row(self) -> tuple:
        return (self.table_path, self.log_start_position, self.removed_files, self.removed_rows,
                self.expired_snapshots)


def _lake(props: dict[str, str]) -> TablePath | None:
    name = props.get(LAKE_TABLE_PROPERTY)
    return TablePath(*name.split(".", 1)) if name else None


def retention_bound(spark: Any, stream: TablePath, props: dict[str, str], now: datetime) -> int:
    """The highest position whose changelog is no longer needed by the lake or by a KV snapshot."""
    lake = _lake(props)
    if lake is None or not spark.catalog.tableExists(lake.quoted):
        return 0
    return needed_after(spark, stream, props, lake_position(load_table(spark, lake))[0], now)


def needed_after(spark: Any, stream: TablePath, props: dict[str, str], tiered: int, now: datetime) -> int:
    """:func:`retention_bound` for a lake tiered up to ``tiered`` (a caller holding the lake table)."""
    bound = tiered
    if TieredSpec.from_properties(props).is_primary_key:
        snaps = kv.KvCatalog(spark).list(stream)
        if not snaps:
            return 0  # nothing could rebuild the state: keep the whole log
        bound = min(bound, snaps[-1].log_position)
        leases = Leases(spark)
        leased = leases.leased_snapshots(stream, now) if leases.supported() else set()
        bound = min([bound] + [s.log_position for s in snaps if s.snapshot_id in leased])
    return bound


def apply(spark: Any, stream: TablePath, now: datetime | None = None) -> Truncation:
    """Remove changelog data past ``table.log.ttl`` that nothing needs any more."""
    now = now or kv.utcnow()
    with kv.table_lock(stream):
        props = kv.properties(spark, stream)
        start = P.read(props, P.LOG_START_PROPERTY)
        result = Truncation(str(stream), start)
        ttl_text = props.get(P.LOG_TTL)
        if not ttl_text:
            return result
        cutoff_ms = int(now.timestamp() * 1000 - parse_duration(ttl_text, P.LOG_TTL).total_seconds() * 1000)
        bound = retention_bound(spark, stream, props, now)
        if bound > start:  # a bound above 0 means a lake table
            # The fresh view reads the lake at the snapshot it was pinned to and
            # the stream after that snapshot's position; its re-pin runs behind
            # the round (or failed), so it may read from before the lake's
            # position: removing what it reads would drop rows from it. Re-pinned
            # first; pins only move forward, so the bound holds after it.
            try:
                pin = fresh_view.refresh(TableHandle(spark, stream, _lake(props)))
            except Exception:
                log.warning("log of %s kept: its fresh view could not be re-pinned", stream, exc_info=True)
                return result
            if pin is not None:
                bound = min(bound, pin)
        stream_table = load_table(spark, stream)
        # The newest commit within the bound that is older than the TTL.
        snapshot, new_start = stream_table.currentSnapshot(), 0
        while snapshot is not None:
            if int(snapshot.sequenceNumber()) <= bound and int(snapshot.timestampMillis()) <= cutoff_ms:
                new_start = int(snapshot.sequenceNumber())
                break
            parent = snapshot.parentId()
            snapshot = stream_table.snapshot(parent) if parent is not None else None
        if new_start <= start:
            return result
        # The log start first: a crash before the delete leaves a conservative
        # start, never a log that silently misses data.
        stream_table.updateProperties().set(P.LOG_START_PROPERTY, str(new_start)).commit()
        stream_table = load_table(spark, stream)
        # DataFile objects, not paths: they carry the data sequence number.
        delete, planned = stream_table.newDelete(), stream_table.newScan().planFiles()
        try:
            tasks = planned.iterator()
            while tasks.hasNext():
                data_file = tasks.next().file()
                if int(data_file.dataSequenceNumber()) <= new_start:
                    delete.deleteFile(data_file)
                    result.removed_files += 1
                    result.removed_rows += int(data_file.recordCount())
        finally:
            planned.close()
        if result.removed_files:
            delete.set(MAINTENANCE, "log-retention")
            delete.set(P.LOG_START_PROPERTY, str(new_start))
            delete.commit()
        result.log_start_position = new_start
        stream_table = load_table(spark, stream)
        old = [int(s.snapshotId()) for s in stream_table.snapshots() if int(s.sequenceNumber()) < new_start]
        if old:
            expire = stream_table.expireSnapshots().expireOlderThan(0)
            for sid in old:
                expire = expire.expireSnapshotId(sid)
            expire.commit()
            result.expired_snapshots = len(old)
        log.info("log retention of %s: log starts after position %d now (%d files, %d rows removed)",
                 stream, new_start, result.removed_files, result.removed_rows)
        return result
