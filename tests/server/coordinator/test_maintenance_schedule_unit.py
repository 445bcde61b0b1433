"""When managed maintenance is due, and the sys housekeeping's bookkeeping (no JVM)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from tierlake.server.config.config import Config
from tierlake.server.coordinator import maintenance_schedule as ms
from tierlake.server.coordinator.state_machine import Policy, Status
from tierlake.server.exceptions import FencedEpochError, MaintenanceNotRunError, NotAssignedError
from tierlake.server.state import housekeeping

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class State:
    def __init__(self, table_id, status, job_id, epoch):
        self.table_id, self.status, self.job_id, self.tiering_epoch = table_id, status, job_id, epoch
        self.database_name, self.table_name, self.next_due = "db", f"t{table_id}", None
        self.created_at = T0  # registered when the test starts

    @property
    def path(self):
        return f"db.t{self.table_id}"


class FakeCoordinator:
    def __init__(self, config):
        self.spark = None
        self.config = config
        self.policy = Policy(heartbeat_timeout=timedelta(seconds=8), retry_backoff=timedelta(seconds=1),
                             retry_backoff_max=timedelta(seconds=2))
        self.now = T0
        self.states = {1: State(1, Status.TIERING, "job", 3)}
        self._jobs_persisted = {"job": T0}
        self.appended = []

    def clock(self):
        return self.now

    def load(self):
        return None, self.states

    def mutate(self, change):
        return change(self.states, self.now)[0]


class FakeLog:
    def __init__(self, sink):
        self.sink = sink

    def append(self, rows):
        self.sink.extend(rows)


@pytest.fixture
def schedule(tmp_path):
    coordinator = FakeCoordinator(Config.load(home=tmp_path))
    out = ms.MaintenanceSchedule.__new__(ms.MaintenanceSchedule)
    out.coordinator = coordinator
    out.log_table = FakeLog(coordinator.appended)
    out.cond, out.requested, out.results, out.last, out.last_orphans = threading.Condition(), {}, {}, {}, {}
    out.file_base, out._history, out._history_lock = {}, {}, threading.Lock()  # no run in the history
    return out


def test_a_new_table_is_first_due_one_interval_after_its_registration_then_every_interval(schedule):
    assert schedule.due("job", 1, 3) == (False, None, None, False)  # its first round carries no maintenance
    schedule.coordinator.now += timedelta(minutes=9)
    assert schedule.due("job", 1, 3)[0] is False
    schedule.coordinator.now += timedelta(minutes=1)
    due, trigger, run_id, orphans = schedule.due("job", 1, 3)
    assert (due, trigger, orphans) == (True, "scheduled", False) and run_id
    schedule.record("job", 1, 3, run_id, trigger, [{"kind": "compaction", "target": "db_lake.t1",
                                                    "started_ms": 0, "duration_ms": 5, "files_rewritten": 7}])
    assert schedule.coordinator.appended[0]["files_rewritten"] == 7
    assert schedule.coordinator.appended[0]["table_name"] == "t1"
    schedule.coordinator.now += timedelta(minutes=5)
    assert schedule.due("job", 1, 3)[0] is False
    schedule.coordinator.now += timedelta(minutes=6)
    due, _, _, orphans = schedule.due("job", 1, 3)
    assert due is True and orphans is False  # orphan files hourly
    schedule.coordinator.now += timedelta(minutes=50)
    assert schedule.due("job", 1, 3)[3] is True


def test_a_restarted_server_continues_each_table_s_schedule_from_the_history(schedule):
    schedule.coordinator.states[2] = State(2, Status.TIERING, "job", 1)
    schedule._history = {1: T0 - timedelta(minutes=11), 2: T0 - timedelta(minutes=4)}
    assert schedule.due("job", 1, 3)[:2] == (True, "scheduled")  # overdue: its last run was 11 min ago
    assert schedule.due("job", 2, 1)[0] is False
    schedule.coordinator.now += timedelta(minutes=6)
    assert schedule.due("job", 2, 1)[:2] == (True, "scheduled")  # 10 min after its last run, not after the restart


def test_a_table_registered_long_ago_and_never_maintained_is_due_at_once(schedule):
    # A server restarted more often than the interval would otherwise never maintain it.
    schedule.coordinator.states[1].created_at = T0 - timedelta(days=1)
    assert schedule.due("job", 1, 3)[:2] == (True, "scheduled")


def test_an_unreadable_history_counts_from_the_registration():
    class Broken:
        def sql(self, _):
            raise RuntimeError("table not found")

    out = ms.MaintenanceSchedule.__new__(ms.MaintenanceSchedule)
    out.coordinator = type("C", (), {"spark": Broken()})()
    out._history, out._history_lock = None, threading.Lock()
    assert out._last_in_history(1) is None and out._history == {}


def test_due_early_once_the_stream_or_lake_gained_the_file_trigger(schedule):
    # The first answer sets the base: 40 large files that were there before are no trigger.
    assert schedule.due("job", 1, 3, 40, 3)[0] is False
    schedule.coordinator.now += timedelta(seconds=10)
    assert schedule.due("job", 1, 3, 40 + ms.FILES_TRIGGER - 1, 3 + ms.FILES_TRIGGER - 1)[0] is False
    schedule.coordinator.now += timedelta(seconds=10)
    due, trigger, run_id, _ = schedule.due("job", 1, 3, 41, 3 + ms.FILES_TRIGGER)  # the lake's gain
    assert (due, trigger) == (True, "files") and run_id
    schedule.record("job", 1, 3, run_id, trigger, [{"kind": "compaction", "target": "db_lake.t1",
                                                    "started_ms": 0, "duration_ms": 5}])
    assert schedule.coordinator.appended[-1]["run_trigger"] == "files"
    # A new base after the run: what it left is not counted again.
    assert schedule.due("job", 1, 3, 41, 3 + ms.FILES_TRIGGER)[0] is False
    assert schedule.due("job", 1, 3, 41 + ms.FILES_TRIGGER, 3)[1] == "files"  # the stream's gain
    # Without counts (an older job) only the interval decides.
    assert schedule.due("job", 1, 3)[0] is False


def test_only_the_job_holding_the_table_at_its_epoch_is_answered(schedule):
    with pytest.raises(NotAssignedError):
        schedule.due("other", 1, 3)
    with pytest.raises(FencedEpochError):
        schedule.due("job", 1, 2)


def test_a_request_is_due_at_once_and_wakes_the_caller(schedule):
    schedule.due("job", 1, 3)  # seen: not due
    state = schedule.coordinator.states[1]
    state.status = Status.SCHEDULED
    run_id = schedule.request(1)
    assert state.next_due == schedule.coordinator.now  # made due now
    state.status = Status.TIERING
    assert schedule.due("job", 1, 3) == (True, "requested", run_id, True)
    threading.Timer(0.1, lambda: schedule.record("job", 1, 3, run_id, "requested", [
        {"kind": "expire_snapshots", "target": "db_lake.t1", "started_ms": 0, "duration_ms": 1,
         "snapshots_expired": 4}])).start()
    rows = schedule.wait(run_id, 10)
    assert rows[0]["snapshots_expired"] == 4 and 1 not in schedule.requested


def test_a_request_without_a_live_job_fails_at_once(schedule):
    schedule.coordinator.now += timedelta(hours=1)
    with pytest.raises(MaintenanceNotRunError, match="no tiering job is alive"):
        schedule.request(1)


def test_a_request_nobody_runs_times_out_and_stays(schedule):
    run_id = schedule.request(1)
    with pytest.raises(MaintenanceNotRunError, match="within 0.1 s"):
        schedule.wait(run_id, 0.1)
    assert schedule.requested == {1: run_id}


def test_interval_zero_turns_scheduled_maintenance_off(schedule, tmp_path):
    schedule.coordinator.config = Config.load(home=tmp_path, conf={"tierlake.maintenance.interval": "0 s"})
    assert schedule.due("job", 1, 3)[0] is False


def test_the_state_tables_are_every_migration_table():
    tables = housekeeping.state_tables()
    assert {"sys.tiering_tables", "sys.tiering_jobs", "sys.tiering_round_log", "sys.lake_maintenance_log",
            "sys.quality_results", "sys.kv_snapshot_lease_state"} <= set(tables)
    assert not [t for t in tables if t.startswith("sys.kv_") and t not in
                ("sys.kv_snapshot_catalog", "sys.kv_snapshot_lease_state")]
    assert set(housekeeping.RETENTION) <= set(tables)


# Their own counts: a server's housekeeper in this process takes from the process's.


def test_many_commits_of_one_table_wake_the_housekeeping():
    counts = housekeeping.CommitCounts()
    for _ in range(housekeeping.COMMITS_BEFORE_EXPIRY - 1):
        counts.note("sys.x")
    assert not counts.pressure.is_set()
    counts.note("sys.x")
    assert counts.pressure.is_set()
    assert counts.take_pressured() == {"sys.x"}
    assert not counts.pressure.is_set()
    assert counts.total == counts.totals["sys.x"] == housekeeping.COMMITS_BEFORE_EXPIRY


def test_many_appends_to_a_history_table_wake_its_file_check():
    # Each append adds a data file: the count must not wait for the next pass.
    counts = housekeeping.CommitCounts()
    for _ in range(housekeeping.HISTORY_MAX_FILES - 1):
        counts.note("sys.tiering_round_log")
    assert not counts.pressure.is_set()
    assert counts.take_appended() == []
    counts.note("sys.tiering_round_log")
    assert counts.pressure.is_set()
    # Expiry's take leaves the wake-up to the file check still owed.
    assert "sys.tiering_round_log" not in counts.take_pressured()
    assert counts.pressure.is_set()
    assert counts.take_appended() == ["sys.tiering_round_log"]
    assert not counts.pressure.is_set()
    assert counts.take_appended() == []


def test_the_process_counts_are_what_note_commit_counts():
    before = housekeeping.commits_total("sys.y")
    housekeeping.note_commit("sys.y")
    assert housekeeping.commits_total("sys.y") == before + 1


def test_wanted_tells_the_idle_check_when_an_assignment_would_run_maintenance(schedule):
    assert schedule.wanted(1, T0) is False  # never asked: its first round asks
    schedule.due("job", 1, 3)
    schedule.coordinator.now += timedelta(minutes=9)
    assert schedule.wanted(1, schedule.coordinator.now) is False
    assert schedule.wanted(1, schedule.coordinator.now + timedelta(minutes=1)) is True  # the interval passed
    schedule.requested[1] = "run"
    assert schedule.wanted(1, schedule.coordinator.now) is True
