"""KV snapshot leases (docs/design.md, 'Leases'): who still needs which snapshot, until when.

A lease is a set of ``(table, bucket) → KV snapshot`` entries with one expiry,
renewed by every acquire under the same lease id. Entries are rows of
``sys.kv_snapshot_lease_state`` (what tierlake's retention reads) and, for
each leased snapshot, an Iceberg tag on the KV table
(``tierlake_lease_<hash of the lease id>_<snapshot id>``) whose max ref age
ends when the lease does, so that even an external
``CALL system.expire_snapshots`` on the KV table keeps it. Iceberg counts a
tag's age from the *snapshot's commit time*, not from the acquire: the tag's
max ref age is therefore ``expires_at - snapshot commit time``, recomputed at
every renewal.

Tags are written before the rows on acquire and removed after them on
release: a concurrent expire either sees the row or is refused by Iceberg.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta
from typing import Any

from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.exceptions import InvalidArgumentError, UnsupportedFeatureError
from tierlake.server.kv.snapshot_catalog import KvCatalog, kv_table_of, primary_key_spec
from tierlake.server.state import migrations
from tierlake.server.state.state_table import SmallTable

log = logging.getLogger("tierlake.leases")

LEASE_TABLE = "sys.kv_snapshot_lease_state"
TAG_PREFIX = "tierlake_lease_"
DEFAULT_DURATION = "6 h"
# sys.drop_lease's one row for a lease that holds nothing.
NOT_FOUND = "not found"
RESULT_COLUMNS = [("table_path", "string"), ("bucket", "int"), ("snapshot_id", "bigint"),
                  ("status", "string"), ("expires_at", "timestamp"), ("detail", "string")]


def tag_prefix(lease_id: str) -> str:
    return f"{TAG_PREFIX}{hashlib.sha1(lease_id.encode()).hexdigest()[:16]}_"


def tag_name(lease_id: str, snapshot_id: int) -> str:
    return f"{tag_prefix(lease_id)}{snapshot_id}"


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


class Leases:
    def __init__(self, spark: Any):
        self.spark = spark
        self.table = SmallTable(spark, LEASE_TABLE)

    def supported(self) -> bool:
        return bool(self.spark.catalog.tableExists(LEASE_TABLE))

    def require(self) -> None:
        """The compatibility rule of Fluss PR 3286: an old server says "unsupported" clearly."""
        if not self.supported():
            raise UnsupportedFeatureError(
                f"KV snapshot leases are unsupported by this server: its sys schema (version "
                f"{migrations.schema_version(self.spark)}) has no {LEASE_TABLE}; upgrade the server")

    # -- reading ------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        return self.table.load()[1]

    def leased_snapshots(self, stream: TablePath, now: datetime) -> set[int]:
        """KV snapshots of ``stream`` under an unexpired lease."""
        return {r["snapshot_id"] for r in self.rows()
                if (r["database_name"], r["table_name"]) == (stream.database, stream.table) and r["expires_at"] > now}

    # -- changing -------------------------------------------------------------------
    def acquire(self, lease_id: str, stream: TablePath, requested: dict[int, int | None] | None,
                duration: timedelta, now: datetime) -> list[tuple]:
        """Lease ``bucket → snapshot`` (``None`` = the newest) and renew the whole lease.

        Snapshots that are no longer retained come back ``unavailable``; the
        others ``acquired`` with the lease's new expiry.
        """
        self.require()
        if not lease_id.strip():
            raise InvalidArgumentError("parameter 'lease_id' must not be empty")
        if duration.total_seconds() <= 0:
            raise InvalidArgumentError(f"the lease duration must be positive, got {duration}")
        props, spec = primary_key_spec(self.spark, stream)
        kv_table = kv_table_of(props)
        retained = {s.snapshot_id: s for s in KvCatalog(self.spark).list(stream)} if kv_table else {}
        newest = max(retained.values(), key=lambda s: s.log_position).snapshot_id if retained else None
        if requested is None:
            requested = {b: None for b in range(spec.buckets)}
        for bucket in requested:
            if not 0 <= bucket < spec.buckets:
                raise InvalidArgumentError(
                    f"bucket {bucket} does not exist: {stream} has buckets 0..{spec.buckets - 1}"
                )
        wanted = {b: (newest if sid is None else sid) for b, sid in sorted(requested.items())}
        expires = now + duration
        available = {
            sid
            for sid in set(wanted.values()) - {None}
            if sid in retained and self._tag(kv_table, lease_id, sid, expires)
        }

        def change(rows):
            for bucket, sid in wanted.items():
                if sid not in available:
                    continue
                key = (lease_id, stream.database, stream.table, bucket)
                previous = next(
                    (r for r in rows if (r["lease_id"], r["database_name"], r["table_name"], r["bucket"]) == key), None
                )
                if previous is not None:
                    rows.remove(previous)
                rows.append(
                    {
                        "lease_id": lease_id,
                        "database_name": stream.database,
                        "table_name": stream.table,
                        "kv_table": str(kv_table),
                        "bucket": bucket,
                        "snapshot_id": sid,
                        "acquired_at": previous["acquired_at"] if previous and previous["snapshot_id"] == sid else now,
                        "expires_at": expires,
                    }
                )
            for r in rows:
                if r["lease_id"] == lease_id:
                    r["expires_at"] = expires
            return [r for r in rows if r["lease_id"] == lease_id], True

        after = self.table.update(change)
        self._sync_tags(
            {(lease_id, r["kv_table"]) for r in after} | ({(lease_id, str(kv_table))} if kv_table else set())
        )
        out = []
        for bucket, sid in wanted.items():
            if sid in available:
                out.append((str(stream), bucket, sid, "acquired", expires, None))
            else:
                log.warning("lease %s: KV snapshot %s of %s bucket %d is unavailable", lease_id, sid, stream, bucket)
                if sid is None:
                    why = (f"{stream} has no KV snapshot yet: CALL sys.kv_snapshot('{stream}') takes one now (the "
                           "first automatic one comes kv.snapshot.interval, 10 min by default, after registration)")
                else:
                    why = (f"KV snapshot {sid} of {stream} is not retained any more: lease the newest (a NULL id) or "
                           "one listed in sys.kv_snapshots")
                out.append((str(stream), bucket, sid, "unavailable", None, why))
        return out

    def release(self, lease_id: str, stream: TablePath | None, buckets: list[int] | None = None) -> list[tuple]:
        """Remove the lease's entries (of one table, optionally some buckets; all with ``stream=None``)."""
        self.require()

        def matches(r):
            return r["lease_id"] == lease_id and (
                stream is None
                or (
                    (r["database_name"], r["table_name"]) == (stream.database, stream.table)
                    and (buckets is None or r["bucket"] in buckets)
                )
            )

        def change(rows):
            gone = [r for r in rows if matches(r)]
            rows[:] = [r for r in rows if not matches(r)]
            return gone, bool(gone)

        gone = self.table.update(change)
        self._sync_tags({(r["lease_id"], r["kv_table"]) for r in gone})
        return [
            (f"{r['database_name']}.{r['table_name']}", r["bucket"], r["snapshot_id"], "released", r["expires_at"],
             None)
            for r in sorted(gone, key=lambda r: (r["database_name"], r["table_name"], r["bucket"]))
        ]

    def prune_expired(self, stream: TablePath, now: datetime) -> int:
        """Forget expired entries of ``stream`` (they no longer protect anything)."""

        def change(rows):
            gone = [
                r
                for r in rows
                if (r["database_name"], r["table_name"]) == (stream.database, stream.table) and r["expires_at"] <= now
            ]
            for r in gone:
                rows.remove(r)
            return gone, bool(gone)

        gone = self.table.update(change)
        self._sync_tags({(r["lease_id"], r["kv_table"]) for r in gone})
        return len(gone)

    # -- Iceberg tags -----------------------------------------------------------------
    def _tag(self, kv_table: TablePath | None, lease_id: str, snapshot_id: int, expires: datetime) -> bool:
        """Tag the snapshot until ``expires``; False if it no longer exists."""
        if kv_table is None or not self.spark.catalog.tableExists(kv_table.quoted):
            return False
        table = load_table(self.spark, kv_table)
        snapshot = table.snapshot(snapshot_id)
        if snapshot is None:
            return False
        name = tag_name(lease_id, snapshot_id)
        age = max(1, _ms(expires) - int(snapshot.timestampMillis()))
        try:
            manage = table.manageSnapshots()
            if name not in {str(n) for n in table.refs().keySet()}:
                manage = manage.createTag(name, snapshot_id)
            manage.setMaxRefAgeMs(name, age).commit()
            return True
        except Exception as e:  # noqa: BLE001 - expired concurrently: unavailable
            log.warning("could not tag KV snapshot %d of %s: %s", snapshot_id, kv_table, str(e).splitlines()[0])
            return False

    def _sync_tags(self, pairs: set[tuple[str, str]]) -> None:
        """Make the lease tags on each KV table match the rows: renew, add, remove."""
        if not pairs:
            return
        rows = self.rows()
        for kv_name in {kv for _, kv in pairs}:
            kv_table = TablePath(*kv_name.split(".", 1))
            if not self.spark.catalog.tableExists(kv_table.quoted):
                continue
            table = load_table(self.spark, kv_table)
            refs = {str(n) for n in table.refs().keySet()}
            manage, changed = table.manageSnapshots(), False
            for lease_id in {lease for lease, kv in pairs if kv == kv_name}:
                prefix = tag_prefix(lease_id)
                desired: dict[int, datetime] = {}
                for r in rows:
                    if r["lease_id"] == lease_id and r["kv_table"] == kv_name:
                        desired[r["snapshot_id"]] = max(r["expires_at"], desired.get(r["snapshot_id"], r["expires_at"]))
                for ref in refs:
                    if ref.startswith(prefix) and int(ref[len(prefix) :]) not in desired:
                        manage, changed = manage.removeTag(ref), True
                for sid, expires in desired.items():
                    snapshot = table.snapshot(sid)
                    if snapshot is None:
                        continue
                    name = tag_name(lease_id, sid)
                    if name not in refs:
                        manage = manage.createTag(name, sid)
                    manage = manage.setMaxRefAgeMs(name, max(1, _ms(expires) - int(snapshot.timestampMillis())))
                    changed = True
            if changed:
                try:
                    manage.commit()
                except Exception:
                    log.warning("could not update lease tags of %s", kv_table, exc_info=True)
