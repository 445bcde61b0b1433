"""The coordinator's group commit (server/coordinator/coordinator.py) with the
state table replaced by an in-memory one whose commits take time (no JVM):
heartbeats from many jobs arriving together share commits, each gets its own
answer, and a change that fails takes nothing of the others with it."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from tierlake.server.config.config import Config
from tierlake.server.coordinator import state_machine as sm
from tierlake.server.coordinator.coordinator import Coordinator
from tierlake.server.coordinator.state_machine import Status, TableState
from tierlake.server.exceptions import FencedEpochError

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class SlowTable:
    """A state table whose commit takes ``commit_s``, like an Iceberg commit."""

    def __init__(self, rows, commit_s=0.05):
        self.rows, self.commit_s, self.commits = rows, commit_s, 0
        self.properties: dict[str, str] = {}
        self.appended: list[dict] = []

    def update_with_properties(self, on_rows):
        rows = [dict(r) for r in self.rows]
        result, changed, props = on_rows(rows, dict(self.properties))
        if changed:
            time.sleep(self.commit_s)
            self.rows, self.commits = rows, self.commits + 1
            self.properties.update(props or {})
        return result

    def update(self, on_rows):
        return self.update_with_properties(lambda rows, _p: (*on_rows(rows), None))

    def append(self, rows, token=None):
        self.appended.extend(rows)


def coordinator(tables: int) -> Coordinator:
    c = Coordinator(spark=None, config=Config.defaults(), clock=lambda: T0)
    states = {}
    for i in range(1, tables + 1):
        s = TableState(table_id=i, database_name="db", table_name=f"t{i}", lake_database="db_lake",
                       lake_table=f"t{i}", properties={})
        sm.register(s, Status.NEW, T0 - timedelta(hours=1))
        states[i] = s
    c.state_table = SlowTable(Coordinator._rows(states))
    c.rounds_table = c.history.table = c.state_table
    c.jobs_table = SlowTable([])
    c.tick()  # every table due: Pending
    c.state_table.commits = 0
    return c


def status(c: Coordinator) -> dict[int, tuple[str, str | None, int]]:
    return {r["table_id"]: (r["status"], r["job_id"], r["tiering_epoch"]) for r in c.state_table.rows}


def together(n, work):
    """``work(i)`` on ``n`` threads started at once; their results by ``i``."""
    results, errors = [None] * n, [None] * n
    gate = threading.Barrier(n)

    def run(i):
        gate.wait()
        try:
            results[i] = work(i)
        except Exception as e:  # noqa: BLE001
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, errors


def test_concurrent_heartbeats_share_commits_and_each_job_gets_its_own_table():
    c = coordinator(16)
    results, errors = together(16, lambda i: c.heartbeat(f"job-{i}", [], [], [], True))
    assert errors == [None] * 16
    assigned = [[a for a in answers if a.kind == "assigned"] for answers in results]
    assert all(len(a) == 1 for a in assigned)
    by_job = {f"job-{i}": a[0].table_id for i, a in enumerate(assigned)}
    assert sorted(by_job.values()) == list(range(1, 17))  # no table handed out twice
    assert {t: (s, j) for t, (s, j, _) in status(c).items()} == {
        t: ("Tiering", job) for job, t in by_job.items()
    }
    # 16 state changes, fewer commits: the ones that waited went in together.
    assert 1 <= c.state_table.commits < 16


def test_a_change_that_raises_fails_alone_and_the_others_commit():
    c = coordinator(4)
    held = {}
    for i in range(4):
        (answer,) = [a for a in c.heartbeat(f"job-{i}", [], [], [], True) if a.kind == "assigned"]
        held[i] = (answer.table_id, answer.tiering_epoch)
    commits = c.state_table.commits

    def half_done(states, now):
        table_id, epoch = held[2]
        states[table_id].job_id = "someone-else"  # changed in place, then the change fails
        raise FencedEpochError(f"tiering epoch {epoch - 1} is stale")

    def work(i):
        if i == 2:
            return c.mutate(half_done)
        table_id, epoch = held[i]
        entry = sm.FinishedEntry(table_id=table_id, tiering_epoch=epoch, rows=1, tiered_position=5)
        return c.heartbeat(f"job-{i}", [], [entry], [], False)

    c.state_table.commit_s = 0.2
    results, errors = together(4, work)
    assert [type(e).__name__ for e in errors] == ["NoneType", "NoneType", "FencedEpochError", "NoneType"]
    assert [[(a.kind, a.error) for a in results[i]] for i in (0, 1, 3)] == [[("finished", None)]] * 3
    after = status(c)
    for i, (table_id, epoch) in held.items():
        if i == 2:
            assert after[table_id] == ("Tiering", "job-2", epoch)  # nothing of the failed change landed
        else:
            assert after[table_id][:2] == ("Scheduled", None)
    # One history row per finished round, none for the failed change.
    assert c.history.flush()
    assert sorted(r["table_id"] for r in c.state_table.appended) == sorted(held[i][0] for i in (0, 1, 3))
    assert c.state_table.commits - commits < 3


def test_a_failed_commit_fails_every_change_in_it():
    c = coordinator(2)

    def broken(on_rows):
        on_rows([dict(r) for r in c.state_table.rows], {})
        raise OSError("disk full")

    c.state_table.update_with_properties = broken
    with pytest.raises(OSError, match="disk full"):
        c.heartbeat("job-0", [], [], [], True)


def test_the_round_history_is_written_behind_the_state_and_a_failed_append_is_retried():
    c = coordinator(3)
    held = {}
    for i in range(3):
        answers = c.heartbeat(f"job-{i}", [], [], [], True)
        held[i] = (answers[0].table_id, answers[0].tiering_epoch)
    c.history.flush()
    c.state_table.appended.clear()
    release, calls = threading.Event(), []
    real_append = c.state_table.append

    def blocked_then_flaky(rows, token=None):
        calls.append((len(rows), token))
        assert release.wait(30)
        if len(calls) == 1:
            raise RuntimeError("history table unavailable")
        real_append(rows)

    c.state_table.append = blocked_then_flaky
    for i, (table_id, epoch) in held.items():
        entry = sm.FinishedEntry(table_id=table_id, tiering_epoch=epoch, rows=1, tiered_position=5)
        assert [a.kind for a in c.heartbeat(f"job-{i}", [], [entry], [], False)] == ["finished"]
    # Every heartbeat was answered while the history append was still held up.
    assert not release.is_set() and calls and not c.history.flush(timeout=0.2)
    release.set()
    assert c.history.flush(timeout=30)
    assert sorted(r["table_id"] for r in c.state_table.appended) == sorted(t for t, _ in held.values())
    assert len(calls) >= 2 and calls[1] == calls[0]  # the failed append was retried: same rows, same token
