"""Iceberg's maintenance actions through its Java API (py4j), counted.

Snapshot expiry, data-file compaction and orphan-file removal, shared by the
``sys`` housekeeping (``server/state/housekeeping.py``) and the managed maintenance of
lake and stream tables (``server/maintenance/tables.py``). The Java
API rather than the ``CALL spark_catalog.system.*`` procedures: it lets a
compaction carry snapshot-summary properties and tells what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Old metadata files are deleted after each commit; this many previous ones stay.
METADATA_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "5",
}


@dataclass
class Compaction:
    files_rewritten: int = 0
    files_added: int = 0
    delete_files_removed: int = 0


def snapshot_count(table: Any) -> int:
    return sum(1 for _ in table.snapshots())


def bound_metadata(table: Any) -> bool:
    """Set :data:`METADATA_PROPERTIES` where missing; whether it committed."""
    props = dict(table.properties())
    missing = {k: v for k, v in METADATA_PROPERTIES.items() if props.get(k) != v}
    if not missing:
        return False
    update = table.updateProperties()
    for key, value in missing.items():
        update = update.set(key, value)
    update.commit()
    return True


def expire_snapshots(spark: Any, table: Any, older_than_ms: int, retain_last: int,
                     before_commit: Callable[[Any], None] | None = None) -> int:
    """Expire snapshots of ``table`` (an Iceberg ``Table``, refreshed here) older than
    ``older_than_ms`` beyond the newest ``retain_last`` of ``main``; their unreferenced files go with them. Tagged
    and branched snapshots stay (Iceberg keeps what a ref retains).
    ``before_commit`` gets the snapshots the expiry removes (a Java list,
    Iceberg's own answer) before it commits; if it raises, nothing is expired.
    A stream table's maintenance passes the table loaded with metastore
    locks (session.iceberg_table's ``locking``).
    Returns how many snapshots were expired (0 commits nothing)."""
    table.refresh()
    times = sorted((int(s.timestampMillis()) for s in table.snapshots()), reverse=True)
    if not any(t < older_than_ms for t in times[retain_last:]):
        return 0  # nothing to expire: no commit (an expiry commits new metadata even when empty)
    before = len(times)
    expire = table.expireSnapshots().expireOlderThan(int(older_than_ms)).retainLast(int(retain_last))
    if before_commit is not None:
        before_commit(expire.apply())
    expire.commit()
    table.refresh()
    return max(0, before - snapshot_count(table))


def data_file_counts(table: Any) -> tuple[int, int]:
    """``(data files, delete files)`` of the current snapshot, from its summary (no scan)."""
    snapshot = table.currentSnapshot()
    if snapshot is None:
        return 0, 0
    # Two lookups on the Java map, not a copy of it entry by entry (called after every round).
    summary = snapshot.summary()
    return int(summary.get("total-data-files") or 0), int(summary.get("total-delete-files") or 0)


def compact(spark: Any, table: Any, options: dict[str, str], properties: dict[str, str] | None = None) -> Compaction:
    """Rewrite small data files (and those with merge-on-read deletes) of ``table`` (an Iceberg
    ``Table``; a stream's loaded with metastore locks); the commit (a ``replace``) carries
    ``properties`` in its summary."""
    jvm = spark.sparkContext._jvm
    table.refresh()
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).rewriteDataFiles(table)
    for key, value in options.items():
        action = action.option(key, value)
    for key, value in (properties or {}).items():
        action = action.snapshotProperty(key, value)
    result = action.execute()
    out = Compaction(int(result.rewrittenDataFilesCount()), int(result.addedDataFilesCount()))
    try:
        out.delete_files_removed = int(result.removedDeleteFilesCount())
    except Exception:  # noqa: BLE001 - older Iceberg: the count is not reported
        out.delete_files_removed = 0
    return out


def remove_orphans(spark: Any, table: Any, older_than_ms: int) -> int:
    """Delete files under ``table``'s location (an Iceberg ``Table``, refreshed here) that no snapshot
    or metadata references and that are older than ``older_than_ms`` (younger ones may belong to a
    commit in flight)."""
    jvm = spark.sparkContext._jvm
    table.refresh()
    result = (jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
              .deleteOrphanFiles(table).olderThan(int(older_than_ms)).execute())
    count = 0
    it = result.orphanFileLocations().iterator()
    while it.hasNext():
        it.next()
        count += 1
    return count
