"""When a table's managed maintenance runs, and its history.

Maintenance of a lake and stream table runs inside the table's tiering
assignment, after a round and before the job reports it finished: while a
job holds the table (status ``Tiering`` with its epoch) no other round of the
table can be assigned, so maintenance and rounds never race. The worker asks
:meth:`MaintenanceSchedule.due` (``CALL sys.maintenance_due``), which checks
the assignment and answers yes when ``tierlake.maintenance.interval`` has
passed since the table's last run (its last run in the history,
``sys.lake_maintenance_log``, read once per server; a table without one
counts from its registration, so a new table's first rounds carry no
maintenance, and a restart does not run every table's at once),
when the lake or the stream table gained :data:`FILES_TRIGGER` data files
since its last run (a timer alone lets small files pile up as fast as
appends come), or when ``CALL sys.run_maintenance`` asked for it; the worker
reports what it did with ``CALL sys.record_maintenance`` (``sys.lake_maintenance_log``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from tierlake import sql
from tierlake.server.config.settings import duration_default
from tierlake.server.coordinator.state_machine import Status
from tierlake.server.exceptions import FencedEpochError, MaintenanceNotRunError, NotAssignedError, UnknownTableIdError
from tierlake.server.state.state_table import SmallTable

log = logging.getLogger("tierlake.maintenance")

LOG_TABLE = "sys.lake_maintenance_log"
Q_LAST_MAINTENANCE = "queries/last_maintenance.sql"
SCHEDULED, REQUESTED, FILES = "scheduled", "requested", "files"
TRIGGERS = (SCHEDULED, REQUESTED, FILES)
ORPHANS_EVERY = timedelta(hours=1)
# Data files a lake or stream table may gain after its last maintenance before
# the next one is due (whatever the interval): bounds its live files.
FILES_TRIGGER = 16


@dataclass
class MaintenanceAction:
    """One action of a maintenance run, as a tiering job reports it (and fills it in while it runs)."""

    kind: str
    target: str
    started_ms: int
    duration_ms: int
    snapshots_expired: int | None = None
    files_rewritten: int | None = None
    delete_files_rewritten: int | None = None
    files_added: int | None = None
    orphans_removed: int | None = None
    detail: str | None = None
    error: str | None = None


def _value(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, dict) else getattr(entry, name, None)


class MaintenanceSchedule:
    """The coordinator's part of managed maintenance (one per server)."""

    def __init__(self, coordinator: Any):
        self.coordinator = coordinator
        self.log_table = SmallTable(coordinator.spark, LOG_TABLE)
        self.cond = threading.Condition()
        self.requested: dict[int, str] = {}
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.last: dict[int, datetime] = {}
        self.last_orphans: dict[int, datetime] = {}
        # Data files of (stream, lake) as first reported after the last run.
        self.file_base: dict[int, tuple[int, int]] = {}
        self._history: dict[int, datetime] | None = None  # last runs in the history, read once
        self._history_lock = threading.Lock()

    def _last_in_history(self, table_id: int) -> datetime | None:
        with self._history_lock:
            if self._history is None:
                self._history = self._read_history()
            return self._history.get(table_id)

    def _read_history(self) -> dict[int, datetime]:
        try:
            rows = self.coordinator.spark.sql(sql.read(Q_LAST_MAINTENANCE)).collect()
        except Exception:  # an unreadable history only moves the first run later
            log.warning("could not read %s: tables count their interval from their registration", LOG_TABLE,
                        exc_info=True)
            return {}
        return {int(r["table_id"]): datetime.fromtimestamp(r["last_ms"] / 1000, timezone.utc)
                for r in rows if r["last_ms"] is not None}

    def interval(self) -> timedelta:
        config = self.coordinator.config
        if config is None:
            return duration_default("tierlake.maintenance.interval")
        return config.duration("tierlake.maintenance.interval")

    def _assigned(self, job_id: str, table_id: int, epoch: int) -> Any:
        _, states = self.coordinator.load()
        state = states.get(table_id)
        if state is None:
            raise UnknownTableIdError(f"table id {table_id} is not registered")
        if state.status is not Status.TIERING or state.job_id != job_id:
            raise NotAssignedError(f"table {state.path} is not being tiered by job {job_id}")
        if state.tiering_epoch != epoch:
            raise FencedEpochError(f"table {state.path}: epoch {epoch} is stale (current {state.tiering_epoch})")
        return state

    def due(self, job_id: str, table_id: int, epoch: int, stream_files: int | None = None,
            lake_files: int | None = None) -> tuple[bool, str | None, str | None, bool]:
        """``(due, trigger, run id, with orphan files)`` for the job holding
        ``table_id`` at ``epoch``, whose stream and lake tables have
        ``stream_files`` and ``lake_files`` live data files (when the job says).
        Orphan-file removal lists the whole table location: it runs when
        requested, else every :data:`ORPHANS_EVERY`."""
        state = self._assigned(job_id, table_id, epoch)
        now = self.coordinator.clock()
        first = None
        if table_id not in self.last:
            # Outside the lock: a Spark query, once per server. Without a run in the history, the
            # table's registration: a server restarted more often than the interval still maintains it.
            first = self._last_in_history(table_id) or getattr(state, "created_at", None) or now
        with self.cond:
            if table_id not in self.last:
                self.last[table_id] = first
            # Only files older than an hour are orphans to remove: the first
            # scheduled pass of a table on this server is an hour after it is seen.
            last_orphans = self.last_orphans.setdefault(table_id, now)
            orphans = now - last_orphans >= ORPHANS_EVERY
            if table_id in self.requested:
                self.last_orphans[table_id] = now
                return True, REQUESTED, self.requested[table_id], True
            interval = self.interval()
            if interval.total_seconds() <= 0:
                return False, None, None, False
            trigger = SCHEDULED if now - self.last[table_id] >= interval else None
            if trigger is None and stream_files is not None and lake_files is not None:
                # Gained since the last run, not a total: files compaction
                # cannot merge (large ones, a partition's only file) would
                # otherwise make every round a maintenance run.
                base = self.file_base.setdefault(table_id, (stream_files, lake_files))
                if max(stream_files - base[0], lake_files - base[1]) >= FILES_TRIGGER:
                    trigger = FILES
            if trigger is None:
                return False, None, None, False
            # Claimed now: a slow run is not started twice.
            self.last[table_id] = now
            self.file_base.pop(table_id, None)
            if orphans:
                self.last_orphans[table_id] = now
            return True, trigger, uuid.uuid4().hex, orphans

    def wanted(self, table_id: int, now: datetime) -> bool:
        """Whether the table's next assignment would run maintenance by request or interval
        (what :meth:`due` answers before it looks at file counts): an idle table gets its
        round for it (server/coordinator/idle.py). False for a table this server has not
        asked about yet; its first round asks."""
        with self.cond:
            if table_id in self.requested:
                return True
            last = self.last.get(table_id)
        interval = self.interval()
        return last is not None and interval.total_seconds() > 0 and now - last >= interval

    def record(self, job_id: str, table_id: int, epoch: int, run_id: str, trigger: str,
               actions: list[Any]) -> int:
        """Append the run's actions to the history; wakes a waiting ``sys.run_maintenance``."""
        _, states = self.coordinator.load()
        state = states.get(table_id)
        if state is None:
            raise UnknownTableIdError(f"table id {table_id} is not registered")
        rows = []
        for a in actions:
            started = datetime.fromtimestamp(int(_value(a, "started_ms") or 0) / 1000, timezone.utc)
            rows.append({
                "run_id": run_id, "table_id": table_id, "database_name": state.database_name,
                "table_name": state.table_name, "target": _value(a, "target"), "kind": _value(a, "kind"),
                "run_trigger": trigger, "tiering_epoch": epoch, "job_id": job_id, "started_at": started,
                **{k: _value(a, k) for k in ("duration_ms", "snapshots_expired", "files_rewritten",
                                             "delete_files_rewritten", "files_added", "orphans_removed",
                                             "detail", "error")},
            })
        try:
            self.log_table.append(rows)
        except Exception:
            log.exception("could not record the maintenance of %s", state.path)
        with self.cond:
            self.last[table_id] = self.coordinator.clock()
            if self.requested.get(table_id) == run_id:
                del self.requested[table_id]
                self.results[run_id] = rows
            self.cond.notify_all()
        return len(rows)

    def _live_jobs(self) -> bool:
        # Jobs' heartbeats are recorded at most every quarter timeout, and a
        # busy job renews late: generous, it only spares a sure timeout.
        seen = getattr(self.coordinator, "_jobs_persisted", {})
        window = max(self.coordinator.policy.heartbeat_timeout * 4, timedelta(minutes=1))
        now = self.coordinator.clock()
        return any(now - t < window for t in seen.values())

    def request(self, table_id: int) -> str:
        """Ask for the table's maintenance at its next assignment, made due now."""
        if not self._live_jobs():
            raise MaintenanceNotRunError(
                "no tiering job is alive: maintenance runs inside a table's tiering assignment; start tiering "
                "workers (--workers) or a tierlake tiering-service")
        with self.cond:
            run_id = self.requested.setdefault(table_id, uuid.uuid4().hex)

        def due_now(states, now):
            state = states.get(table_id)
            if state is None or state.status is not Status.SCHEDULED:
                return None, False, []
            state.next_due = now
            return None, True, []

        self.coordinator.mutate(due_now)
        return run_id

    def wait(self, run_id: str, timeout_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while run_id not in self.results:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MaintenanceNotRunError(
                        f"no tiering job ran the requested maintenance within {timeout_s:g} s; it stays requested "
                        "and runs after the table's next round")
                self.cond.wait(left)
            return self.results.pop(run_id)
