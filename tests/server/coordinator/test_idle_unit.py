"""Which due tables the coordinator leaves Scheduled (server/coordinator/idle.py), without Spark:
the stream's metadata location comes from a dict."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tierlake.server.coordinator import state_machine as sm
from tierlake.server.coordinator.idle import StreamWatch
from tierlake.server.coordinator.state_machine import Policy, Status, TableState

T0 = datetime(2026, 11, 28, tzinfo=timezone.utc)


class FakeWatch(StreamWatch):
    def __init__(self):
        super().__init__(spark=None)
        self.locations: dict[int, str] = {}
        self.reads = 0

    def location(self, state):
        self.reads += 1
        self._tables[state.table_id] = (state.path, None)
        value = self.locations[state.table_id]
        if isinstance(value, Exception):
            raise value
        return value


def table(table_id=1, status=Status.SCHEDULED, due=T0, freshness="10 s") -> TableState:
    return TableState(table_id, "db", f"t{table_id}", "db_lake", f"t{table_id}", status=status, next_due=due,
                      properties={"table.datalake.freshness": freshness})


def never(_table_id, _now):
    return False


def test_a_stream_unchanged_since_its_round_was_sent_is_quiet_until_it_changes():
    watch = FakeWatch()
    watch.locations[1] = "m1.json"
    quiet, read = watch.due_unchanged([table()], T0, never)
    assert (quiet, read) == (set(), {1: "m1.json"}), "never sent: its round runs"
    watch.sent(read, {1})
    quiet, read = watch.due_unchanged([table()], T0 + timedelta(seconds=10), never)
    assert (quiet, read) == ({1}, {})
    assert watch.skipped == 1
    # Looked at again only after a freshness interval; a write in between waits for that look.
    watch.locations[1] = "m2.json"
    reads = watch.reads
    assert watch.due_unchanged([table()], T0 + timedelta(seconds=15), never)[0] == {1}
    assert watch.reads == reads
    quiet, read = watch.due_unchanged([table()], T0 + timedelta(seconds=20), never)
    assert (quiet, read) == (set(), {1: "m2.json"})


def test_a_move_that_did_not_commit_is_not_remembered():
    watch = FakeWatch()
    watch.locations[1] = "m1.json"
    _, read = watch.due_unchanged([table()], T0, never)
    watch.sent(read, set())  # the state commit failed or another change won: no round was sent
    assert watch.due_unchanged([table()], T0 + timedelta(seconds=10), never) == (set(), {1: "m1.json"})


def test_maintenance_due_or_requested_gets_the_idle_table_its_round():
    watch = FakeWatch()
    watch.locations[1] = "m1.json"
    watch.sent(watch.due_unchanged([table()], T0, never)[1], {1})
    quiet, read = watch.due_unchanged([table()], T0 + timedelta(seconds=10), lambda table_id, now: table_id == 1)
    assert (quiet, read) == (set(), {1: "m1.json"})


def test_only_due_scheduled_tables_are_looked_at_and_unreadable_streams_get_their_round():
    watch = FakeWatch()
    watch.locations.update({1: "m1.json", 2: "m2.json", 3: RuntimeError("table not found")})
    states = [table(1, due=T0 + timedelta(hours=1)), table(2, status=Status.FAILED), table(3)]
    assert watch.due_unchanged(states, T0, never) == (set(), {})
    assert watch.reads == 1  # table 3 only; its failure leaves it to the round
    watch._sent[3] = "old.json"
    watch.due_unchanged(states, T0, never)
    assert 3 not in watch._sent


def test_dropped_tables_are_forgotten():
    watch = FakeWatch()
    watch.locations[1] = "m1.json"
    watch.sent(watch.due_unchanged([table()], T0, never)[1], {1})
    watch.due_unchanged([], T0, never)
    assert watch._sent == {} and watch._tables == {}


def test_schedule_leaves_quiet_tables_scheduled_but_retries_failed_ones():
    states = {1: table(1), 2: table(2, status=Status.FAILED), 3: table(3)}
    out = sm.schedule(states, T0, Policy(), quiet={1, 2})
    assert states[1].status is Status.SCHEDULED
    assert states[2].status is Status.PENDING  # a retry is never skipped
    assert states[3].status is Status.PENDING
    assert out.changed == {2, 3}
