"""SmallTable's optimistic read-modify-write, without Spark (load/replace stubbed)."""

import pytest

from tierlake.server.exceptions import ConcurrentUpdateError
from tierlake.server.runtime.jvm_errors import SimulatedJavaError
from tierlake.server.state import state_table as smalltable
from tierlake.server.state.state_table import SmallTable


class FakeTable(SmallTable):
    def __init__(self, failures):
        super().__init__(spark=None, name="sys.fake")
        self.rows, self.snapshot, self.failures, self.loads = [{"n": 0}], 1, list(failures), 0

    def load(self):
        self.loads += 1
        return self.snapshot, [dict(r) for r in self.rows]

    def properties(self):
        return {}

    def replace(self, rows, base, properties=None, table=None):
        if self.failures:
            raise self.failures.pop(0)
        assert base == self.snapshot
        self.rows, self.snapshot = rows, self.snapshot + 1


def bump(rows):
    rows[0]["n"] += 1
    return rows[0]["n"], True


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(smalltable.time, "sleep", lambda s: None)


def test_a_lost_race_is_recomputed_from_fresh_rows():
    lost = SimulatedJavaError("org.apache.iceberg.exceptions.ValidationException", message="Found conflicting files")
    table = FakeTable([lost])
    assert table.update(bump) == 1
    assert table.rows == [{"n": 1}] and table.loads == 2


def test_other_errors_are_not_retried():
    table = FakeTable([RuntimeError("disk full")])
    with pytest.raises(RuntimeError, match="disk full"):
        table.update(bump)
    assert table.loads == 1


def test_endless_conflicts_end_in_a_typed_error():
    lost = SimulatedJavaError("org.apache.iceberg.exceptions.CommitFailedException")
    table = FakeTable([lost] * smalltable.MAX_ATTEMPTS)
    with pytest.raises(ConcurrentUpdateError, match="sys.fake kept changing concurrently"):
        table.update(bump)


def test_no_change_commits_nothing():
    table = FakeTable([RuntimeError("must not be called")])
    assert table.update(lambda rows: ("same", False)) == "same"
    assert table.snapshot == 1
