"""Retention of KV snapshots: the newest ``kv.snapshot.num-retained`` are
kept, and every snapshot under an unexpired lease (:mod:`tierlake.server.kv.leases`).

Retention is tierlake's, not Iceberg's age-based expiry (the KV tables never
expire by age, see ``NEVER_MS``): an expired KV snapshot is expired in its
KV table by id and removed from the KV catalog.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.exceptions import InvalidArgumentError
from tierlake.server.kv.leases import Leases
from tierlake.server.kv.snapshot_catalog import NUM_RETAINED, KvCatalog, KvSnapshot, table_lock, utcnow
from tierlake.server.runtime.jvm_errors import Kind, is_

log = logging.getLogger("tierlake.kv")


def num_retained(props: dict[str, str], config: Any) -> int:
    raw = P.raw(props, P.NUM_RETAINED, config)
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(f"'{NUM_RETAINED}' must be a whole number, got {raw!r}") from None
    if value < 1:
        raise InvalidArgumentError(
            f"'{NUM_RETAINED}' must be at least 1 (the newest snapshot is always kept), got {value}"
        )
    return value


def expire(
    spark: Any, stream: TablePath, retain: int, now: datetime | None = None, catalog: KvCatalog | None = None
) -> list[tuple[KvSnapshot, str]]:
    """Expire all but the newest ``retain`` KV snapshots, except leased ones.

    Returns every snapshot with its outcome: ``retained``, ``leased`` or
    ``expired``. Expired leases of the table are removed as well; they no
    longer protect anything.
    """
    if retain < 1:
        raise InvalidArgumentError(f"retain must be at least 1 (the newest snapshot is always kept), got {retain}")
    catalog = catalog or KvCatalog(spark)
    leases = Leases(spark)
    now = now or utcnow()
    out: list[tuple[KvSnapshot, str]] = []
    with table_lock(stream):
        snaps = catalog.list(stream)
        newest = {s.snapshot_id for s in snaps[-retain:]}
        leased = leases.leased_snapshots(stream, now) if leases.supported() else set()
        gone: set[int] = set()
        for snap in snaps:
            if snap.snapshot_id in newest:
                out.append((snap, "retained"))
            elif snap.snapshot_id in leased:
                out.append((snap, "leased"))
            elif _expire_in_iceberg(spark, snap):
                gone.add(snap.snapshot_id)
                out.append((snap, "expired"))
            else:
                out.append((snap, "leased"))
        catalog.remove(stream, gone)
        if leases.supported():
            leases.prune_expired(stream, now)
    if gone:
        log.info("expired KV snapshots %s of %s", sorted(gone), stream)
    return out


def _expire_in_iceberg(spark: Any, snap: KvSnapshot) -> bool:
    """Expire one snapshot of the KV table; False when an Iceberg tag (a lease) still holds it."""
    kv = TablePath(*snap.kv_table.split(".", 1))
    if not spark.catalog.tableExists(kv.quoted):
        return True
    table = load_table(spark, kv)
    if table.snapshot(snap.snapshot_id) is None:
        return True  # already gone (an external expire_snapshots)
    try:
        # expireOlderThan(0): only this snapshot, nothing by age.
        table.expireSnapshots().expireOlderThan(0).expireSnapshotId(snap.snapshot_id).commit()
        return True
    except Exception as e:
        if is_(e, Kind.STILL_REFERENCED):
            return False
        raise
