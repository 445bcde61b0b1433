"""The KV catalog: which KV snapshots are retained, the KV tables and their names.

Every primary-key stream table has a companion **KV table**
(``sys.kv_<table>_<id>``, named by the stream table property
``tierlake.kv-table``; the KV table names its stream back with
``tierlake.kv-table-of``). The retained KV snapshots are rows of
``sys.kv_snapshot_catalog`` (the view ``sys.kv_snapshots``). A KV table whose
stream table is gone is an orphan and dropped (:func:`drop_orphans`).
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tierlake import sql
from tierlake.server.catalog.properties import (  # noqa: F401 - the kv package's names for them
    KV_OF_PROPERTY,
    KV_POSITION,
    KV_STREAM_SNAPSHOT,
    KV_TABLE_PROPERTY,
    LOG_START_PROPERTY,
    NUM_RETAINED,
    SNAPSHOT_INTERVAL,
)
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.exceptions import InvalidArgumentError, NoSuchTableError
from tierlake.server.state.state_table import SmallTable

log = logging.getLogger("tierlake.kv")

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
    return {str(k): str(v) for k, v in dict(load_table(spark, stream).properties()).items()}


def primary_key_spec(spark: Any, stream: TablePath) -> tuple[dict[str, str], TieredSpec]:
    props = properties(spark, stream)
    return props, require_primary_key(stream, props)


def require_primary_key(stream: TablePath, props: dict[str, str]) -> TieredSpec:
    """The spec of a stream with these properties; an error unless it has a primary key."""
    spec = TieredSpec.from_properties(props)
    if not spec.is_primary_key:
        raise InvalidArgumentError(f"table {stream} has no primary key: KV snapshots are kept for primary-key tables")
    return spec


class KvCatalog:
    """``sys.kv_snapshot_catalog``: the retained KV snapshots of every table."""

    def __init__(self, spark: Any):
        self.table = SmallTable(spark, CATALOG_TABLE)

    def list(self, stream: TablePath) -> list[KvSnapshot]:
        """Oldest first."""
        _, rows = self.table.load()
        snaps = [
            KvSnapshot(**r) for r in rows if (r["database_name"], r["table_name"]) == (stream.database, stream.table)
        ]
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
            keep = [
                r
                for r in rows
                if not (
                    (r["database_name"], r["table_name"]) == (stream.database, stream.table)
                    and r["snapshot_id"] in snapshot_ids
                )
            ]
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
