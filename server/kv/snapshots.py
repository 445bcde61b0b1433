"""KV snapshots of primary-key stream tables (DESIGN §4).

A KV snapshot is the key→row state of a stream table at a log position. It
is kept as one Iceberg snapshot of the table's companion **KV table**
(``sys.kv_<table>_<id>``, named by the stream table property
``tierlake.kv-table``), bucketed like the stream table. The KV snapshot id
*is* that Iceberg snapshot id; one snapshot covers every bucket, so a lease
on ``bucket → id`` names the same id for each bucket. The snapshot's summary
records the stream position (``tierlake.kv.log-position``) and the stream
snapshot at it.

Each new snapshot applies the changelog since the previous one with the same
MERGE a tiering round uses, so its cost is the delta, not the table. The
retained snapshots are listed in ``sys.kv_snapshot_catalog`` (the view
``sys.kv_snapshots``); retention keeps the newest ``kv.snapshot.num-retained``
plus every snapshot under an unexpired lease.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from tierlake import sql
from tierlake.server.exceptions import InvalidArgumentError, NoSuchTableError, TieringGuardError
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.runtime.state_table import SmallTable
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.planner import LOG_START, summary
from tierlake.server.catalog.spec import CHANGE_TYPE, TieredSpec, data_columns

log = logging.getLogger("tierlake.kv")

KV_TABLE_PROPERTY = "tierlake.kv-table"
KV_OF_PROPERTY = "tierlake.kv-table-of"
LOG_START_PROPERTY = LOG_START
KV_POSITION = "tierlake.kv.log-position"
KV_STREAM_SNAPSHOT = "tierlake.kv.stream-snapshot-id"
SNAPSHOT_INTERVAL = "kv.snapshot.interval"
NUM_RETAINED = "kv.snapshot.num-retained"
CATALOG_TABLE = "sys.kv_snapshot_catalog"
T_DROP_TABLE = "templates/drop_table.sql.j2"
KV_DATABASE = "sys"
# Retention is tierlake's: Iceberg's own age-based expiry (5 days by default,
# also what a bare external expire_snapshots uses) must not drop a retained
# KV snapshot of a quiet table.
NEVER_MS = str(100 * 365 * 24 * 3600 * 1000)

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def table_lock(stream: TablePath) -> threading.Lock:
    """One KV writer per stream table in this process (snapshots, retention, log truncation)."""
    with _locks_guard:
        return _locks.setdefault(str(stream), threading.Lock())


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class KvSnapshot:
    database_name: str
    table_name: str
    kv_table: str
    snapshot_id: int
    log_position: int
    stream_snapshot_id: int
    created_at: datetime

    @property
    def stream(self) -> TablePath:
        return TablePath(self.database_name, self.table_name)

    def row(self) -> dict[str, Any]:
        return dict(vars(self))


def properties(spark: Any, stream: TablePath) -> dict[str, str]:
    if not spark.catalog.tableExists(stream.quoted):
        raise NoSuchTableError(f"table {stream} does not exist")
    return {str(k): str(v) for k, v in dict(iceberg_table(spark, stream.quoted).properties()).items()}


def primary_key_spec(spark: Any, stream: TablePath) -> tuple[dict[str, str], TieredSpec]:
    props = properties(spark, stream)
    spec = TieredSpec.from_properties(props)
    if not spec.is_primary_key:
        raise InvalidArgumentError(f"table {stream} has no primary key: KV snapshots are kept for primary-key tables")
    return props, spec


class KvCatalog:
    """``sys.kv_snapshot_catalog``: the retained KV snapshots of every table."""

    def __init__(self, spark: Any):
        self.table = SmallTable(spark, CATALOG_TABLE)

    def list(self, stream: TablePath) -> list[KvSnapshot]:
        """Oldest first."""
        _, rows = self.table.load()
        snaps = [KvSnapshot(**r) for r in rows if (r["database_name"], r["table_name"]) == (stream.database, stream.table)]
        return sorted(snaps, key=lambda s: (s.log_position, s.created_at))

    def newest(self, stream: TablePath) -> KvSnapshot | None:
        snaps = self.list(stream)
        return snaps[-1] if snaps else None

    def add(self, snap: KvSnapshot) -> None:
        def change(rows):
            if any(r["kv_table"] == snap.kv_table and r["snapshot_id"] == snap.snapshot_id for r in rows):
                return None, False
            rows.append(snap.row())
            return None, True

        self.table.update(change)

    def remove(self, stream: TablePath, snapshot_ids: set[int]) -> None:
        def change(rows):
            keep = [r for r in rows if not ((r["database_name"], r["table_name"]) == (stream.database, stream.table)
                                            and r["snapshot_id"] in snapshot_ids)]
            changed = len(keep) != len(rows)
            rows[:] = keep
            return None, changed

        if snapshot_ids:
            self.table.update(change)

    def forget_kv_table(self, kv: TablePath) -> None:
        def change(rows):
            keep = [r for r in rows if r["kv_table"] != str(kv)]
            changed = len(keep) != len(rows)
            rows[:] = keep
            return None, changed

        self.table.update(change)


def drop_orphans(spark: Any, catalog: KvCatalog | None = None) -> list[str]:
    """Drop KV tables whose stream table is gone or names another KV table.

    A user's ``DROP TABLE`` of a stream table is relayed to Spark unseen, so
    its KV table (and its files) would stay forever; a re-created stream of
    the same name gets a KV table of its own.
    """
    catalog = catalog or KvCatalog(spark)
    dropped = []
    for entry in spark.catalog.listTables(KV_DATABASE):
        if not entry.name.startswith("kv_") or entry.isTemporary or entry.tableType == "VIEW":
            continue  # sys.kv_snapshots and sys.kv_snapshot_leases are views
        kv = TablePath(KV_DATABASE, entry.name)
        owner = properties(spark, kv).get(KV_OF_PROPERTY)
        if not owner:
            continue  # not a KV table of ours
        stream = TablePath(*owner.split(".", 1))
        with table_lock(stream):  # a snapshot being taken names its KV table on the stream last
            if spark.catalog.tableExists(stream.quoted) and properties(spark, stream).get(KV_TABLE_PROPERTY) == str(kv):
                continue
            spark.sql(sql.render(T_DROP_TABLE, table=[kv.database, kv.table], purge=True))
            catalog.forget_kv_table(kv)
        log.info("dropped KV table %s: its stream table %s is gone", kv, stream)
        dropped.append(str(kv))
    return dropped


def kv_table_name(stream: TablePath) -> TablePath:
    stem = re.sub(r"[^a-z0-9_]", "_", stream.table.lower())[:40]
    return TablePath(KV_DATABASE, f"kv_{stem}_{uuid.uuid4().hex[:10]}")


def kv_table_of(props: dict[str, str]) -> TablePath | None:
    name = props.get(KV_TABLE_PROPERTY)
    return TablePath(*name.split(".", 1)) if name else None


def _ensure_kv_table(spark: Any, stream: TablePath, props: dict[str, str], spec: TieredSpec) -> TablePath:
    from tierlake.server.tiering.round import columns_of
    from tierlake.server.catalog.tiered_tables import create_lake_table

    kv = kv_table_of(props)
    if kv is not None and spark.catalog.tableExists(kv.quoted):
        return kv
    kv = kv or kv_table_name(stream)
    columns = columns_of(spark.table(stream.quoted).schema)
    create_lake_table(spark, stream, kv, columns, TieredSpec(spec.primary_key, spec.buckets, spec.sequence_by, []))
    iceberg_table(spark, kv.quoted).updateProperties().set("history.expire.max-snapshot-age-ms", NEVER_MS) \
        .set(KV_OF_PROPERTY, str(stream)).commit()
    iceberg_table(spark, stream.quoted).updateProperties().set(KV_TABLE_PROPERTY, str(kv)).commit()
    log.info("created KV table %s for %s", kv, stream)
    return kv


def bucket_field(spark: Any, stream: TablePath) -> str | None:
    return next((str(f.name()) for f in iceberg_table(spark, stream.quoted).spec().fields()
                 if str(f.transform().toString()).startswith("bucket")), None)


def _newest_in_kv_table(spark: Any, kv: TablePath) -> tuple[int, int | None, Any]:
    """``(log position, stream snapshot id, Iceberg snapshot)`` of the KV table's current state."""
    current = iceberg_table(spark, kv.quoted).currentSnapshot()
    if current is None:
        return 0, None, None
    s = summary(current)
    if KV_POSITION not in s:
        raise TieringGuardError(f"KV table {kv} was changed outside tierlake (its current snapshot "
                                f"{current.snapshotId()} carries no {KV_POSITION})")
    return int(s[KV_POSITION]), int(s[KV_STREAM_SNAPSHOT]), current


def take_snapshot(spark: Any, stream: TablePath, catalog: KvCatalog | None = None) -> tuple[KvSnapshot, bool]:
    """A KV snapshot at the stream's current end: ``(snapshot, created)``.

    Nothing new since the newest snapshot → that one, ``created = False``.
    """
    from tierlake.server.tiering.round import T_PK_MERGE, T_STREAM_FILES, columns_of, sync_lake_schema, with_commit_properties

    catalog = catalog or KvCatalog(spark)
    with table_lock(stream):
        props, spec = primary_key_spec(spark, stream)
        head = iceberg_table(spark, stream.quoted).currentSnapshot()
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
        if start < int(props.get(LOG_START_PROPERTY, "0")):
            raise TieringGuardError(
                f"the changelog of {stream} before position {props[LOG_START_PROPERTY]} was removed by log "
                f"retention and the KV table {kv} does not reach it: the state cannot be rebuilt")
        sync_lake_schema(spark, SimpleNamespace(stream=stream, lake=kv))
        reader = spark.read.format("iceberg")
        reader = (reader.option("snapshot-id", str(head_id)) if start_id is None else
                  reader.option("start-snapshot-id", str(start_id)).option("end-snapshot-id", str(head_id)))
        suffix = uuid.uuid4().hex[:12]
        delta, files = f"__tierlake_kv_delta_{suffix}", f"__tierlake_kv_files_{suffix}"
        columns = [c.name for c in data_columns(columns_of(spark.table(stream.quoted).schema))]
        props_out = {KV_POSITION: str(end), KV_STREAM_SNAPSHOT: str(head_id), "commit-user": "tierlake"}
        before = None if current is None else int(current.snapshotId())
        try:
            reader.load(stream.quoted).selectExpr("*", "_file", "_pos").createOrReplaceTempView(delta)
            spark.sql(sql.render_checked(T_STREAM_FILES, entries=[stream.database, stream.table, "entries"],
                                         bucket_field=bucket_field(spark, stream)),
                      args={"start_position": start, "end_position": end}).createOrReplaceTempView(files)
            statement = sql.render_checked(T_PK_MERGE, target=[kv.database, kv.table], delta=delta, files=files,
                                           columns=columns, keys=spec.primary_key, sequence_by=spec.sequence_by,
                                           change_type=CHANGE_TYPE)
            with_commit_properties(spark, props_out, lambda: spark.sql(statement))
        finally:
            spark.catalog.dropTempView(delta)
            spark.catalog.dropTempView(files)
        table = iceberg_table(spark, kv.quoted)
        new = table.currentSnapshot()
        if new is None or int(new.snapshotId()) == before:
            # The delta changed no row (only -U rows, say): an empty commit
            # still records the position.
            append = table.newAppend()
            for key, value in props_out.items():
                append.set(key, value)
            append.commit()
            new = iceberg_table(spark, kv.quoted).currentSnapshot()
        snap = KvSnapshot(stream.database, stream.table, str(kv), int(new.snapshotId()), end, head_id,
                          datetime.fromtimestamp(new.timestampMillis() / 1000, timezone.utc))
        catalog.add(snap)
        log.info("KV snapshot %d of %s at log position %d", snap.snapshot_id, stream, end)
        return snap, True


def num_retained(props: dict[str, str], config: Any) -> int:
    raw = props.get(NUM_RETAINED) or (config.get("tierlake.kv.snapshot.num-retained", "2") if config else "2")
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(f"'{NUM_RETAINED}' must be a whole number, got {raw!r}") from None
    if value < 1:
        raise InvalidArgumentError(f"'{NUM_RETAINED}' must be at least 1 (the newest snapshot is always kept), got {value}")
    return value


def expire(spark: Any, stream: TablePath, retain: int, now: datetime | None = None,
           catalog: KvCatalog | None = None) -> list[tuple[KvSnapshot, str]]:
    """Expire all but the newest ``retain`` KV snapshots, except leased ones.

    Returns every snapshot with its outcome: ``retained``, ``leased`` or
    ``expired``. Expired leases of the table are removed as well; they no
    longer protect anything.
    """
    from tierlake.server.kv.leases import Leases

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
    table = iceberg_table(spark, kv.quoted)
    if table.snapshot(snap.snapshot_id) is None:
        return True  # already gone (an external expire_snapshots)
    try:
        # expireOlderThan(0): only this snapshot, nothing by age.
        table.expireSnapshots().expireOlderThan(0).expireSnapshotId(snap.snapshot_id).commit()
        return True
    except Exception as e:  # noqa: BLE001 - py4j-wrapped ValidationException
        if "Still referenced by refs" in str(e):
            return False
        raise
