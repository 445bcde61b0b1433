"""Periodic KV snapshots, their retention and log retention, in the server.

Every ``tierlake.kv.maintenance-interval`` the server looks at each
registered table: a primary-key table whose newest KV snapshot (or, before
its first, its registration) is older than ``kv.snapshot.interval`` gets a
new snapshot; retention keeps ``kv.snapshot.num-retained`` plus leased ones;
a table with ``table.log.ttl`` has its log truncated; a fresh view made for
another stream schema (a column renamed on an idle or Failed table) is
re-pinned; a KV table whose
stream table was dropped is dropped too. One table's failure is
logged and does not stop the others.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.kv import log_retention as logretention
from tierlake.server.kv import snapshot_catalog as kv
from tierlake.server.kv.retention import expire, num_retained
from tierlake.server.kv.snapshots import take_snapshot

log = logging.getLogger("tierlake.kv")


def snapshot_interval(props: dict[str, str], config: Any) -> timedelta:
    return P.read(props, P.SNAPSHOT_INTERVAL, config)


def maintain(spark: Any, config: Any, stream: TablePath, registered_at: datetime | None, now: datetime) -> list[str]:
    """What one table needs now; returns what was done (for logs and tests)."""
    done = []
    props = kv.properties(spark, stream)
    lake = props.get(P.LAKE_TABLE_PROPERTY)
    if lake:
        # A stream column renamed on an idle or Failed table: its fresh view names the old column.
        try:
            if fresh_view.repin_if_schema_changed(TableHandle(spark, stream, TablePath(*lake.split(".", 1)), config)):
                done.append("fresh view re-pinned")
        except Exception:
            log.warning("could not check the fresh view of %s", stream, exc_info=True)
    if TieredSpec.from_properties(props).is_primary_key:
        interval = snapshot_interval(props, config)
        catalog = kv.KvCatalog(spark)
        newest = catalog.newest(stream)
        since = newest.created_at if newest else registered_at
        if interval.total_seconds() > 0 and since is not None and since + interval <= now:
            if take_snapshot(spark, stream, catalog)[1]:
                done.append("snapshot")
        if catalog.list(stream):
            expired = [s for s, outcome in expire(spark, stream, num_retained(props, config), now, catalog)
                       if outcome == "expired"]
            if expired:
                done.append(f"expired {len(expired)}")
    if props.get(P.LOG_TTL):
        if logretention.apply(spark, stream, now).removed_files:
            done.append("log truncated")
    return done


class KvMaintenance(threading.Thread):
    def __init__(self, server: Any):
        super().__init__(name="tierlake-kv-maintenance", daemon=True)
        self.server = server
        self.interval = server.config.duration("tierlake.kv.maintenance-interval")
        self.stop_event = threading.Event()

    def run_once(self) -> dict[str, list[str]]:
        _, states = self.server.coordinator.load()
        now = kv.utcnow()
        out = {}
        try:
            for kv_table in kv.drop_orphans(self.server.spark):
                out[kv_table] = ["dropped orphan KV table"]
        except Exception:
            log.warning("dropping orphan KV tables failed", exc_info=True)
        for state in sorted(states.values(), key=lambda s: s.table_id):
            stream = TablePath(state.database_name, state.table_name)
            try:
                if self.server.spark.catalog.tableExists(stream.quoted):
                    out[str(stream)] = maintain(self.server.spark, self.server.config, stream, state.created_at, now)
            except Exception:
                log.warning("KV maintenance of %s failed", stream, exc_info=True)
        return out

    def run(self) -> None:
        while not self.stop_event.wait(self.interval.total_seconds()):
            try:
                self.run_once()
            except Exception:
                log.exception("KV maintenance tick failed")

    def stop(self) -> None:
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=60)
