"""The tiering state machine without a JVM."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from tierlake.server.coordinator import state_machine as sm
from tierlake.server.coordinator.state_machine import (
    FailedEntry,
    FinishedEntry,
    Policy,
    Status,
    TableState,
    TieringEntry,
)
from tierlake.server.exceptions import IllegalTransitionError

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
POLICY = Policy(heartbeat_timeout=timedelta(seconds=60), retry_backoff=timedelta(seconds=5))
ALL = [None, *Status]


def table(table_id=1, status=None, **kw) -> TableState:
    return TableState(table_id, "shop", f"t{table_id}", "shop_lake", f"t{table_id}", status=status, **kw)


LEGAL = sorted(
    ((src, dst) for src, dsts in sm.TRANSITIONS.items() for dst in dsts),
    key=lambda p: (str(p[0]), p[1].value),
)
ILLEGAL = [
    (src, dst)
    for src, dst in itertools.product(ALL, Status)
    if dst not in sm.TRANSITIONS.get(src, frozenset())
]


def test_the_transition_table_is_fluss_s_plus_force_finished():
    assert {(s and s.value, d.value) for s, d in LEGAL} == {
        (None, "New"), (None, "Initialized"),
        ("New", "Scheduled"), ("Initialized", "Scheduled"),
        ("Scheduled", "Pending"), ("Pending", "Tiering"),
        ("Tiering", "Tiered"), ("Tiering", "Failed"),
        ("Tiered", "Scheduled"), ("Tiered", "Pending"),
        ("Failed", "Pending"),
    }


@pytest.mark.parametrize("src,dst", LEGAL, ids=lambda v: getattr(v, "value", str(v)))
def test_every_legal_transition(src, dst):
    state = table(status=src, tiering_epoch=3)
    sm.transition(state, dst, T0)
    assert state.status is dst
    assert state.updated_at == T0
    # Every entry into Pending, and only that, bumps the epoch.
    assert state.tiering_epoch == (4 if dst is Status.PENDING else 3)


@pytest.mark.parametrize("src,dst", ILLEGAL, ids=lambda v: getattr(v, "value", str(v)))
def test_every_illegal_transition_raises(src, dst):
    state = table(status=src, tiering_epoch=3)
    with pytest.raises(IllegalTransitionError) as info:
        sm.transition(state, dst, T0)
    assert f"-> {dst.value}" in info.value.message
    assert state.status is src and state.tiering_epoch == 3


def test_full_cycle_through_heartbeats():
    states = {1: table()}
    sm.register(states[1], Status.NEW, T0)
    assert states[1].status is Status.SCHEDULED
    out = sm.heartbeat(states, "job-1", [], [], [], True, T0, POLICY)
    assert [a.row() for a in out.answers] == [("assigned", 1, "shop.t1", 1, None)]
    assert states[1].status is Status.TIERING and states[1].job_id == "job-1"

    out = sm.heartbeat(states, "job-1", [TieringEntry(1, 1)], [], [], False, T0 + timedelta(seconds=5), POLICY)
    assert out.answers[0].error is None
    done = T0 + timedelta(seconds=10)
    out = sm.heartbeat(states, "job-1", [], [FinishedEntry(1, 1, rows=5, bytes=10, files=1, tiered_position=7)],
                       [], False, done, POLICY)
    assert states[1].status is Status.SCHEDULED
    assert states[1].last_tiered_time == done and states[1].tiered_position == 7
    (rnd,) = out.rounds
    assert (rnd.outcome, rnd.rows, rnd.start_position, rnd.end_position, rnd.duration_ms) == (
        "finished", 5, 0, 7, 10_000)
    # Not due before the freshness (1 min default) has passed since the round finished.
    out = sm.heartbeat(states, "job-1", [], [], [], True, done + timedelta(seconds=59), POLICY)
    assert out.answers == [] and states[1].status is Status.SCHEDULED
    out = sm.heartbeat(states, "job-1", [], [], [], True, done + timedelta(seconds=60), POLICY)
    assert out.answers[0].kind == "assigned" and out.answers[0].tiering_epoch == 2


def test_start_position_is_where_the_round_started():
    states = {1: table(), 2: table(2, tiered_position=40)}
    for state in states.values():
        sm.register(state, Status.NEW, T0)
    positions = {}
    for at in range(4):  # first rounds, then second rounds of both tables
        now = T0 + timedelta(minutes=2 * at)
        out = sm.heartbeat(states, "job-1", [], [], [], True, now, POLICY)
        (assigned,) = [a for a in out.answers if a.kind == "assigned"]
        tid, epoch = assigned.table_id, assigned.tiering_epoch
        end = (states[tid].tiered_position or 0) + 10
        out = sm.heartbeat(states, "job-1", [], [FinishedEntry(tid, epoch, rows=3, tiered_position=end)], [], False,
                           now + timedelta(seconds=1), POLICY)
        (rnd,) = out.rounds
        positions.setdefault(tid, []).append((rnd.start_position, rnd.end_position))
    # A table's first round starts at 0 (never NULL); one registered with a
    # tiered position (an atomic CTAS) starts there; later rounds where the
    # previous one ended.
    assert positions == {1: [(0, 10), (10, 20)], 2: [(40, 50), (50, 60)]}
    # A failed first round, too.
    fresh = {3: table(3)}
    sm.register(fresh[3], Status.NEW, T0)
    sm.heartbeat(fresh, "job-1", [], [], [], True, T0, POLICY)
    out = sm.heartbeat(fresh, "job-1", [], [], [FailedEntry(3, 1, "boom")], False, T0, POLICY)
    assert (out.rounds[0].outcome, out.rounds[0].start_position) == ("failed", 0)


def test_freshness_comes_from_the_table_property():
    state = table(status=Status.TIERING, tiering_epoch=1, job_id="j", properties={"table.datalake.freshness": "5 s"})
    sm.finish(state, FinishedEntry(1, 1), T0, sm.Outcome())
    assert state.next_due == T0 + timedelta(seconds=5)


def test_force_finished_goes_pending_at_once_with_a_new_epoch():
    states = {1: table(status=Status.TIERING, tiering_epoch=4, job_id="j")}
    out = sm.heartbeat(
        states, "j", [], [FinishedEntry(1, 4, force_finished=True, rows=10, tiered_position=9)], [], False, T0, POLICY
    )
    assert states[1].status is Status.PENDING and states[1].tiering_epoch == 5
    assert out.rounds[0].outcome == "force_finished"


def test_failure_keeps_the_error_until_the_next_success():
    states = {1: table(status=Status.TIERING, tiering_epoch=2, job_id="j")}
    long_error = "boom 'quoted'\nnew line ✓ " + "x" * 10_000
    sm.heartbeat(states, "j", [], [], [FailedEntry(1, 2, long_error)], False, T0, POLICY)
    s = states[1]
    assert s.status is Status.FAILED
    assert len(s.last_error) == sm.MAX_ERROR_CHARS and s.last_error.endswith("…")
    assert s.last_error.startswith("boom 'quoted'\\nnew line ✓ ")  # one line: server/escaping.py
    assert s.last_error_time == T0 and s.failure_count == 1
    # Back-off, then Pending with a new epoch.
    sm.schedule(states, T0 + timedelta(seconds=4), POLICY)
    assert s.status is Status.FAILED
    sm.schedule(states, T0 + timedelta(seconds=5), POLICY)
    assert s.status is Status.PENDING and s.tiering_epoch == 3
    assert s.last_error is not None  # still visible while it retries
    sm.heartbeat(states, "k", [], [], [], True, T0 + timedelta(seconds=6), POLICY)
    sm.heartbeat(states, "k", [], [FinishedEntry(1, 3)], [], False, T0 + timedelta(seconds=7), POLICY)
    assert s.last_error is None and s.last_error_time is None and s.failure_count == 0


def test_backoff_doubles_and_is_capped():
    policy = Policy(retry_backoff=timedelta(seconds=5), retry_backoff_max=timedelta(seconds=30))
    assert [policy.backoff(n).total_seconds() for n in range(1, 6)] == [5, 10, 20, 30, 30]


def test_a_failure_without_message_still_works():
    states = {1: table(status=Status.TIERING, tiering_epoch=1, job_id="j")}
    out = sm.heartbeat(states, "j", [], [], [FailedEntry(1, 1)], False, T0, POLICY)
    assert out.answers[0].error is None
    assert states[1].status is Status.FAILED and states[1].last_error is None


def test_bad_entries_are_answered_alone():
    states = {
        1: table(1, status=Status.TIERING, tiering_epoch=3, job_id="j"),
        2: table(2, status=Status.TIERING, tiering_epoch=1, job_id="other"),
        3: table(3, status=Status.PENDING, tiering_epoch=1),
    }
    out = sm.heartbeat(
        states,
        "j",
        tiering=[TieringEntry(1, 2), TieringEntry(2, 1), TieringEntry(3, 1), TieringEntry(99, 1)],
        finished=[FinishedEntry(1, 3)],
        failed=[],
        request_table=False,
        now=T0,
        policy=POLICY,
    )
    errors = {(a.kind, a.table_id): a.error for a in out.answers}
    assert "tiering epoch 2 of table shop.t1 (id 1) is stale: the current epoch is 3" in errors[("tiering", 1)]
    assert "is being tiered by job other, not j" in errors[("tiering", 2)]
    assert "is not being tiered (status Pending)" in errors[("tiering", 3)]
    assert "table id 99 is not registered" in errors[("tiering", 99)]
    assert errors[("finished", 1)] is None and states[1].status is Status.SCHEDULED


def test_timeout_requeues_with_an_error_naming_the_job():
    states = {1: table(status=Status.TIERING, tiering_epoch=1, job_id="job-7", last_heartbeat=T0)}
    sm.schedule(states, T0 + timedelta(seconds=59), POLICY)
    assert states[1].status is Status.TIERING
    out = sm.schedule(states, T0 + timedelta(seconds=61), POLICY)
    s = states[1]
    assert s.status is Status.PENDING and s.tiering_epoch == 2 and s.job_id is None
    assert "tiering job job-7 sent no heartbeat for 61 s" in s.last_error
    assert out.rounds[0].outcome == "timed_out"


def test_renewals_held_in_memory_prevent_the_timeout():
    states = {1: table(status=Status.TIERING, tiering_epoch=1, job_id="j", last_heartbeat=T0)}
    liveness = {1: T0 + timedelta(seconds=50)}
    sm.schedule(states, T0 + timedelta(seconds=70), POLICY, liveness)
    assert states[1].status is Status.TIERING


def test_the_most_overdue_pending_table_is_assigned_first():
    states = {
        1: table(1, status=Status.PENDING, pending_since=T0 + timedelta(seconds=5)),
        2: table(2, status=Status.PENDING, pending_since=T0),
    }
    out = sm.heartbeat(states, "a", [], [], [], True, T0 + timedelta(seconds=10), POLICY)
    assert out.answers[0].table_id == 2
    out = sm.heartbeat(states, "b", [], [], [], True, T0 + timedelta(seconds=10), POLICY)
    assert out.answers[0].table_id == 1
    out = sm.heartbeat(states, "c", [], [], [], True, T0 + timedelta(seconds=10), POLICY)
    assert out.answers == []


def test_retry_only_from_failed():
    s = table(status=Status.FAILED, tiering_epoch=1)
    sm.retry(s, T0)
    assert s.status is Status.PENDING and s.tiering_epoch == 2
    with pytest.raises(IllegalTransitionError, match="only a Failed table can be retried"):
        sm.retry(s, T0)


def test_rounds_that_found_nothing_new_are_not_history():
    states = {1: table(status=Status.TIERING, tiering_epoch=1, job_id="j", tiered_position=5)}
    out = sm.heartbeat(states, "j", [], [FinishedEntry(1, 1, rows=0, tiered_position=5)], [], False, T0, POLICY)
    assert out.rounds == [] and states[1].status is Status.SCHEDULED and states[1].last_tiered_time == T0


def test_disable_closes_the_round_in_progress():
    started = T0 - timedelta(seconds=30)
    s = table(status=Status.TIERING, tiering_epoch=3, job_id="j", round_started=started, tiered_position=9)
    rnd = sm.disable(s, T0)
    assert (rnd.table_id, rnd.database_name, rnd.table_name, rnd.tiering_epoch, rnd.job_id) == (1, "shop", "t1", 3, "j")
    assert (rnd.started_at, rnd.ended_at, rnd.start_position, rnd.end_position) == (started, T0, 9, 9)
    assert (rnd.rows, rnd.bytes, rnd.files, rnd.outcome, rnd.error, rnd.duration_ms) == (
        None,
        None,
        None,
        "disabled",
        None,
        30_000,
    )
    # An idle table: no job, no start time.
    idle = sm.disable(table(status=Status.SCHEDULED), T0)
    assert (idle.job_id, idle.started_at, idle.duration_ms, idle.outcome) == (None, None, None, "disabled")


def test_a_restarted_job_releases_what_its_earlier_run_left_at_once():
    states = {
        1: table(1, status=Status.TIERING, tiering_epoch=3, job_id="job-7", last_heartbeat=T0),
        2: table(2, status=Status.TIERING, tiering_epoch=5, job_id="job-8", last_heartbeat=T0),
        3: table(3, status=Status.TIERING, tiering_epoch=1, job_id="job-7", last_heartbeat=T0),
    }
    now = T0 + timedelta(seconds=1)  # long before the heartbeat timeout
    out = sm.heartbeat(states, "job-7", [TieringEntry(3, 1)], [], [], False, now, POLICY, job_started=True)
    s = states[1]
    assert s.status is Status.PENDING and s.tiering_epoch == 4 and s.job_id is None  # the old epoch is fenced
    assert "tiering job job-7 restarted while it tiered this table (epoch 3)" in s.last_error
    assert [r.outcome for r in out.rounds] == ["abandoned"]
    assert states[2].status is Status.TIERING  # another job's table
    assert states[3].status is Status.TIERING  # one the job reports it still tiers
    # Without the flag a heartbeat leaves unreported tables alone (a round may be starting).
    states[4] = table(4, status=Status.TIERING, tiering_epoch=1, job_id="job-7", last_heartbeat=T0)
    sm.heartbeat(states, "job-7", [], [], [], False, now, POLICY)
    assert states[4].status is Status.TIERING
