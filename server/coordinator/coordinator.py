"""The coordinator: tiering state in ``sys`` Iceberg tables, changed through
the pure state machine (:mod:`server.statemachine`).

Every change is one Iceberg commit of the whole (small) ``sys.tiering_tables``
table, validated against the snapshot it was computed from
(``validate-from-snapshot-id`` with serializable isolation): a concurrent
writer makes the commit fail and the change is recomputed from fresh state.
Inside one server, changes are also serialised by a lock, so retries only
happen across processes.

Table ids come from a counter kept as a property of the state table
(``tierlake.next-table-id``) and set in the same commit as the rows: an id is
handed out once, whatever is disabled, dropped or killed afterwards.

Heartbeat renewals are kept in memory and persisted at most every quarter of
the heartbeat timeout, so a job that only renews costs no commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from tierlake import sql
from tierlake.server.catalog.properties import NEXT_TABLE_ID
from tierlake.server.config.config import Config
from tierlake.server.coordinator import state_machine as sm
from tierlake.server.coordinator.history import HistoryWriter
from tierlake.server.coordinator.idle import StreamWatch
from tierlake.server.coordinator.maintenance_schedule import MaintenanceSchedule
from tierlake.server.coordinator.state_machine import Policy, Status, TableState
from tierlake.server.observability import metrics
from tierlake.server.runtime import periodic
from tierlake.server.state.state_table import SmallTable

log = logging.getLogger("tierlake.coordinator")

STATE_TABLE = "sys.tiering_tables"
ROUNDS_TABLE = "sys.tiering_round_log"
JOBS_TABLE = "sys.tiering_jobs"
Q_MAX_TABLE_ID = "queries/max_table_id.sql"

_COLUMNS = [
    "table_id", "database_name", "table_name", "lake_database", "lake_table", "status",
    "tiering_epoch", "job_id", "last_heartbeat", "last_tiered_time", "tiered_position",
    "last_error", "last_error_time", "failure_count", "properties", "created_at", "updated_at",
    "pending_since", "round_started", "next_due", "stream_uuid",
]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def policy_from_config(config: Config | None) -> Policy:
    config = config or Config.defaults()
    return Policy(
        heartbeat_timeout=config.duration("tierlake.tiering.heartbeat-timeout"),
        retry_backoff=config.duration("tierlake.tiering.retry-backoff"),
        retry_backoff_max=config.duration("tierlake.tiering.retry-backoff-max"),
    )


class _Ticket:
    """One change waiting for a group commit, and what it came to."""

    __slots__ = ("change", "done", "result", "error", "rounds")

    def __init__(self, change: Callable[[dict[int, TableState], datetime], Any]):
        self.change = change
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.rounds: list[sm.Round] = []

    def settle(self, result: Any = None, error: BaseException | None = None, rounds: list | None = None) -> None:
        self.result, self.error, self.rounds = result, error, rounds or []

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class Coordinator:
    """All coordinator state changes of one server go through one instance."""

    def __init__(self, spark: Any, config: Any = None, clock: Callable[[], datetime] = utcnow):
        self.spark = spark
        self.config = config
        self.policy = policy_from_config(config)
        self.clock = clock
        self.lock = threading.RLock()
        self.liveness: dict[int, datetime] = {}
        self.state_table = SmallTable(spark, STATE_TABLE)
        self.rounds_table = SmallTable(spark, ROUNDS_TABLE)
        self.history = HistoryWriter(self.rounds_table)  # written behind the state (coordinator/history.py)
        self.jobs_table = SmallTable(spark, JOBS_TABLE)
        self._jobs_persisted: dict[str, datetime] = {}
        self._job_counts: dict[str, list[int]] = {}
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._queue_lock = threading.Lock()
        self._queue: list[_Ticket] = []
        self.maintenance = MaintenanceSchedule(self)  # managed maintenance runs inside assignments
        # Idle tables get no round (coordinator/idle.py); a coordinator without Spark (unit tests) tiers all.
        self.streams = None if spark is None else StreamWatch(spark)
        self._latest: dict[int, TableState] | None = None  # the states of the last commit (or load)
        self._next_id = 1  # the counter as of the commit being computed (under self.lock)
        self._legacy_next_id: int | None = None

    # -- state I/O ------------------------------------------------------------
    @staticmethod
    def _states(rows: list[dict[str, Any]]) -> dict[int, TableState]:
        states = {}
        for d in rows:
            d = dict(d, status=Status(d["status"]) if d["status"] else None,
                     properties=dict(d["properties"] or {}))
            states[d["table_id"]] = TableState(**d)
        return states

    @staticmethod
    def _rows(states: dict[int, TableState]) -> list[dict[str, Any]]:
        rows = []
        for s in sorted(states.values(), key=lambda s: s.table_id):
            row = {c: getattr(s, c) for c in _COLUMNS}
            row["status"] = s.status.value if s.status else None
            rows.append(row)
        return rows

    def load(self) -> tuple[int | None, dict[int, TableState]]:
        """``(snapshot id, states)``, fresh copies the caller may change."""
        snap, rows = self.state_table.load()
        return snap, self._states(rows)

    def mutate(self, change: Callable[[dict[int, TableState], datetime], Any]) -> Any:
        """Run ``change(states, now)`` and commit what it changed, retrying on conflicts.

        ``change`` returns ``(result, changed: bool, rounds: list)``; the rounds
        of the attempt that committed go to the history. What ``change`` raises
        is raised here and nothing it did is committed.

        Group commit: changes that arrive while another commit is in flight
        wait for the lock together, and the first of them to get it applies
        them all, in arrival order, in one commit of the state table (and one
        append to the history). Each change still sees the states the earlier
        ones left and gets its own result or exception.
        """
        ticket = _Ticket(change)
        with self._queue_lock:
            self._queue.append(ticket)
        with self.lock:
            if not ticket.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._apply(batch)
        return ticket.outcome()

    def new_table_id(self, states: dict[int, TableState]) -> int:
        """An id no table ever had: for a change inside :meth:`mutate` that registers one.

        The counter is committed with the rows that use it, so neither a
        disable→enable nor a crash can hand the same id out again."""
        table_id = max([self._next_id, *(s.table_id + 1 for s in states.values())])
        self._next_id = table_id + 1
        return table_id

    def _counter(self, properties: dict[str, str]) -> int:
        if NEXT_TABLE_ID in properties:
            return int(properties[NEXT_TABLE_ID])
        # A state table from before the counter: past ids are the ones in the state and the history.
        if self._legacy_next_id is None:
            self._legacy_next_id = 1 if self.spark is None else (
                int(self.spark.sql(sql.read(Q_MAX_TABLE_ID)).collect()[0]["max_id"]) + 1)
        return self._legacy_next_id

    def _apply(self, batch: list[_Ticket]) -> None:
        final: list[dict[int, TableState]] = []  # the states of the attempt that committed (the last)

        def on_rows(rows, properties):
            states = self._states(rows)
            final[:] = [states]
            counter = self._next_id = self._counter(properties)
            now = self.clock()
            changed_any = False
            alone = len(batch) == 1
            for ticket in batch:
                before = None if alone else {k: s.copy() for k, s in states.items()}
                try:
                    result, changed, rounds = ticket.change(states, now)
                except BaseException as e:  # noqa: BLE001 - handed to the caller that made the change
                    ticket.settle(error=e)
                    changed = False
                else:
                    ticket.settle(result=result, rounds=rounds if changed else [])
                if not changed and before is not None:
                    # An unchanged or failed change leaves nothing behind for the others' commit.
                    states.clear()
                    states.update(before)
                changed_any = changed_any or changed
            props = None
            if changed_any:
                rows[:] = self._rows(states)
                top = max([self._next_id, *(s.table_id + 1 for s in states.values())])
                if top != counter or NEXT_TABLE_ID not in properties:
                    props = {NEXT_TABLE_ID: str(top)}
            return None, changed_any, props

        try:
            self.state_table.update_with_properties(on_rows)
        except BaseException as e:  # noqa: BLE001 - the commit failed: every change in it did
            for ticket in batch:
                ticket.settle(error=e)
                ticket.done = True
            return
        if final:
            self._latest = final[0]
            metrics.TABLES.publish_states(final[0].values())  # /metrics and the status page read this copy
        rounds = [r for ticket in batch if ticket.error is None for r in ticket.rounds]
        for ticket in batch:
            ticket.done = True
        if rounds:
            self._record_rounds(rounds)

    def _record_rounds(self, rounds: list[sm.Round]) -> None:
        self.history.add([dict(vars(r), duration_ms=r.duration_ms) for r in rounds])

    # -- heartbeats -------------------------------------------------------------
    def _persist_liveness(self, states: dict[int, TableState], changed: set[int]) -> None:
        quarter = self.policy.heartbeat_timeout / 4
        for table_id, seen in list(self.liveness.items()):
            state = states.get(table_id)
            if state is None or state.status is not Status.TIERING:
                self.liveness.pop(table_id, None)
                continue
            if state.last_heartbeat is None or seen - state.last_heartbeat >= quarter:
                state.last_heartbeat = seen
                changed.add(table_id)

    def heartbeat(self, job_id: str, tiering, finished, failed, request_table: bool,
                  refresh_properties: Callable[[TableState], None] | None = None,
                  job_started: bool = False) -> list[sm.Answer]:
        """``CALL sys.heartbeat``: see :func:`server.statemachine.heartbeat`."""

        # Re-reading a finished table's properties loads its Iceberg metadata: done
        # before the commit, so heartbeats that share a group commit do not wait for it.
        refreshed: dict[int, dict[str, str]] = {}
        if refresh_properties is not None and finished:
            _, known = self.load()
            for entry in finished:
                state = known.get(entry.table_id)
                if state is not None:
                    refresh_properties(state)
                    refreshed[entry.table_id] = state.properties

        quiet, read = self._idle_check() if request_table else (set(), {})

        def change(states, now):
            for table_id, properties in refreshed.items():
                if table_id in states:
                    states[table_id].properties = dict(properties)
            out = sm.heartbeat(states, job_id, tiering, finished, failed, request_table, now,
                               self.policy, self.liveness, job_started=job_started, quiet=quiet)
            self._persist_liveness(states, out.changed)
            return out, bool(out.changed), out.rounds

        with metrics.HEARTBEAT_DURATION.time():
            out = self.mutate(change)
        self._sent(read, out.changed)
        self._touch_job(job_id, out)
        return out.answers

    def _touch_job(self, job_id: str, out: sm.Outcome) -> None:
        """Record the job's heartbeat and round counts.

        Written when a job is first seen, then at most every quarter of the
        heartbeat timeout: counts accumulate in memory meanwhile, so the end
        of a round does not pay a third Iceberg commit.
        """
        now = self.clock()
        counts = self._job_counts.setdefault(job_id, [0, 0])
        counts[0] += sum(1 for r in out.rounds if r.job_id == job_id and r.outcome.endswith("finished"))
        counts[1] += sum(1 for r in out.rounds if r.job_id == job_id and not r.outcome.endswith("finished"))
        last = self._jobs_persisted.get(job_id)
        if last is not None and now - last < self.policy.heartbeat_timeout / 4:
            return
        finished, failed = counts

        def on_rows(jobs):
            job = next((j for j in jobs if j["job_id"] == job_id), None)
            if job is None:
                job = {"job_id": job_id, "first_seen": now, "rounds_finished": 0, "rounds_failed": 0}
                jobs.append(job)
            job["last_heartbeat"] = now
            job["rounds_finished"] += finished
            job["rounds_failed"] += failed
            return None, True

        try:
            with self.lock:
                self.jobs_table.update(on_rows)
            counts[0] -= finished
            counts[1] -= failed
            self._jobs_persisted[job_id] = now
        except Exception:
            log.exception("could not record heartbeat of job %s", job_id)

    # -- time-driven changes ----------------------------------------------------
    def tick(self) -> set[int]:
        """Timeouts, due tables, retries; commits only when something changed."""

        quiet, read = self._idle_check()

        def change(states, now):
            out = sm.schedule(states, now, self.policy, self.liveness, quiet=quiet)
            return out.changed, bool(out.changed), out.rounds

        changed = self.mutate(change)
        self._sent(read, changed)
        return changed

    def _idle_check(self) -> tuple[set[int], dict[int, str]]:
        """Which due tables stay Scheduled because their stream is unchanged (coordinator/idle.py).

        Before the change, outside the commit lock: a metastore call per due table must
        not hold up the heartbeats that share a group commit."""
        if self.streams is None:
            return set(), {}
        latest = self._latest
        if latest is None:
            _, latest = self.load()
        return self.streams.due_unchanged(list(latest.values()), self.clock(), self.maintenance.wanted)

    def _sent(self, read: dict[int, str], changed: set[int]) -> None:
        if self.streams is not None and read:
            self.streams.sent(read, changed)

    def start_ticker(self, interval: timedelta) -> None:
        def tick() -> None:
            changed = self.tick()
            if changed:
                # Every round starts with one of these: at INFO it doubled the one line a round logs.
                log.debug("scheduler moved tables %s", sorted(changed))

        self._ticker = periodic.every(interval.total_seconds(), self._stop, tick, "tierlake-scheduler", log,
                                      "scheduler tick")

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=30)
        self.history.stop()
