"""The backlog probe behind ``sys.lake_tiering_lag``.

A plain view cannot read every stream table's Iceberg metadata, so the
server keeps ``sys.tiering_backlog``: one row per *append* commit of a
registered stream table after its tiered position (commit time, rows and
bytes it added). The probe walks each stream table's snapshot chain back
from the current snapshot to the coordinator's tiered position (only the
pending commits, however long the history) and commits the table only when
the set of pending commits changed, so an idle or caught-up server commits
nothing.

It runs on its own timer (``tierlake.tiering.lag-probe-interval``), not as
part of a round: a table that keeps failing, or is never assigned, is still
measured. The view filters the rows by the coordinator's tiered position,
so a round that tiered is reflected at once; a new stream commit shows at
the next probe (lag is under-reported by at most one interval).
Replace commits (compaction, manifest rewrites) add no new data and are not
pending.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any

from tierlake.server.catalog.table_path import TablePath, coordinator_path, load_table
from tierlake.server.observability import metrics
from tierlake.server.runtime import periodic
from tierlake.server.state.state_table import SmallTable

log = logging.getLogger("tierlake.tiering")

BACKLOG_TABLE = "sys.tiering_backlog"
_DATA_OPERATIONS = ("append", "overwrite")


def pending_commits(spark: Any, stream: TablePath, tiered_position: int | None) -> list[dict[str, Any]]:
    """The stream table's append commits after ``tiered_position``, newest first."""
    stream_table = load_table(spark, stream)
    snapshot = stream_table.currentSnapshot()
    floor = tiered_position or 0
    out = []
    while snapshot is not None and int(snapshot.sequenceNumber()) > floor:
        if str(snapshot.operation()) in _DATA_OPERATIONS:
            summary = snapshot.summary()
            out.append({
                "log_position": int(snapshot.sequenceNumber()),
                "committed_at": datetime.fromtimestamp(int(snapshot.timestampMillis()) / 1000, timezone.utc),
                "record_count": int(summary.get("added-records") or 0),
                "file_bytes": int(summary.get("added-files-size") or 0),
            })
        parent = snapshot.parentId()
        snapshot = None if parent is None else stream_table.snapshot(parent)
    return out


def lake_totals(spark: Any, state: Any) -> tuple[int | None, int | None]:
    """``(data files, bytes)`` of the lake table's current snapshot, from its summary (metadata only)."""
    try:
        snapshot = load_table(spark, TablePath(state.lake_database, state.lake_table)).currentSnapshot()
    except Exception:  # noqa: BLE001 - a lake not created yet (no round so far) has no totals
        return None, None
    if snapshot is None:
        return 0, 0
    summary = snapshot.summary()
    return int(summary.get("total-data-files") or 0), int(summary.get("total-files-size") or 0)


class BacklogProbe:
    """Keeps ``sys.tiering_backlog`` current for every registered table."""

    def __init__(self, spark: Any, coordinator: Any):
        self.spark = spark
        self.coordinator = coordinator
        self.table = SmallTable(spark, BACKLOG_TABLE)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def probe(self) -> bool:
        """Probe every registered table now; True when the backlog changed."""
        with self._lock:
            _, states = self.coordinator.load()
            fresh: dict[tuple[int, int], dict[str, Any]] = {}
            probed: set[int] = set()
            for state in states.values():
                try:
                    commits = pending_commits(self.spark, coordinator_path(state.path), state.tiered_position)
                except Exception as e:  # noqa: BLE001 - a dropped table must not stop the others
                    log.debug("backlog probe of %s failed: %s", state.path, e)
                    continue
                probed.add(state.table_id)
                metrics.TABLES.publish_backlog(state.table_id, commits, *lake_totals(self.spark, state))
                for commit in commits:
                    fresh[(state.table_id, commit["log_position"])] = dict(commit, table_id=state.table_id)
            now = datetime.now(timezone.utc)

            def change(rows):
                # Rows of tables that could not be probed this time are kept as they were.
                kept = {(r["table_id"], r["log_position"]): r for r in rows
                        if r["table_id"] in states and r["table_id"] not in probed}
                old = {(r["table_id"], r["log_position"]) for r in rows}
                new = {**kept, **fresh}
                if set(new) == old:
                    return False, False
                rows[:] = [dict(new[k], probed_at=new[k].get("probed_at") or now) for k in sorted(new)]
                return True, True

            return self.table.update(change)

    def start(self, interval_s: float) -> None:
        self._thread = periodic.every(interval_s, self._stop, self.probe, "tierlake-backlog-probe", log,
                                      "backlog probe")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
