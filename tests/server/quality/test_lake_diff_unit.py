"""What sys.validate's lake comparison replays the expected rows from, and when it cannot
(server/quality/lake_diff.py), on stand-ins of Iceberg tables: no JVM."""

from __future__ import annotations

import json

import pytest

from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.quality import lake_diff

STREAM = TablePath("db", "t")
LOG, PK = TieredSpec(), TieredSpec.from_properties({"primary-key": "id"})


class Snap:
    def __init__(self, sequence, parent, operation="append"):
        self.sequence, self.parent, self.op = sequence, parent, operation

    def sequenceNumber(self):
        return self.sequence

    def snapshotId(self):
        return 100 + self.sequence

    def parentId(self):
        return self.parent

    def operation(self):
        return self.op

    def summary(self):
        return {"added-records": "1"}

    def timestampMillis(self):
        return 0


class Stream:
    """Snapshots 1..n in one line of history; ``expired``: sequences whose snapshot is gone."""

    def __init__(self, n, expired=(), log_start=0):
        self.snaps = {100 + s: Snap(s, None if s == 1 else 100 + s - 1) for s in range(1, n + 1) if s not in expired}
        self.head = self.snaps[100 + n]
        self.props = {"tierlake.log.start-position": str(log_start)} if log_start else {}

    def currentSnapshot(self):
        return self.head

    def snapshot(self, sid):
        return self.snaps.get(sid)

    def properties(self):
        return self.props


def replayed(stream, spec):
    """A handle over the fake stream table (the replay reads nothing else of it)."""
    return TableHandle.loaded(None, STREAM, TablePath("d_lake", "t"), stream, spec=spec)


def unverifiable(stream, spec, position, bases=()):
    with pytest.raises(lake_diff._Unverifiable) as info:
        lake_diff._source(replayed(stream, spec), position, bases)
    return str(info.value)


def test_a_log_table_is_read_as_of_the_snapshot_at_the_position():
    source = lake_diff._source(replayed(Stream(5, expired={1, 2}), LOG), 3, ())
    assert (source.chunk.start_snapshot_id, source.chunk.end_snapshot_id, source.chunk.end_position) == (None, 103, 3)
    assert source.kv is None and source.describe == "the stream's rows as of snapshot 103"


def test_nothing_tiered_expects_an_empty_lake():
    source = lake_diff._source(replayed(Stream(3), PK), 0, ())
    assert source.chunk is None and source.kv is None


def test_a_primary_key_table_replays_its_changes_from_the_first_commit():
    source = lake_diff._source(replayed(Stream(5), PK), 4, ())
    assert source.describe == "the stream's changes from its first commit"
    assert [c.sequence for c in source.chunk.commits] == [1, 2, 3, 4] and source.chunk.start_snapshot_id is None


def test_what_the_stream_no_longer_holds_is_unverifiable():
    assert "log retention (table.log.ttl) removed the stream's rows up to position 2" in unverifiable(
        Stream(5, log_start=2), LOG, 4)
    assert "no longer has its snapshot at the lake's position 2" in unverifiable(Stream(5, expired={2}), LOG, 2)
    # A primary-key table whose early history expired, with no KV snapshot reaching the rest.
    assert "no retained KV snapshot reaches it (CALL sys.kv_snapshot('db.t')" in unverifiable(
        Stream(5, expired={1}), PK, 4)
    # A KV snapshot before the log start does not help either (its changes after it are gone).
    base = lake_diff.KvBase("db.t__kv", 7, 1, 101)
    assert "no retained KV snapshot" in unverifiable(Stream(5, expired={1}, log_start=2), PK, 4, [base])


def test_the_outcome_row_says_the_status_counts_and_samples():
    diff = lake_diff.Diff(lake_diff.DIFFERS, 9, "the stream's changes from its first commit", 1, 2,
                          [{"id": 2}], [{"id": 3}, {"id": 4}],
                          other_commits=[{"snapshot_id": 5, "parent_id": 4, "operation": "delete"}],
                          other_commit_count=1)
    row = diff.outcome()
    assert (row.expectation, row.success, row.unexpected_count) == ("tierlake_lake_equals_stream(position=9)",
                                                                     False, 3)
    assert json.loads(row.observed_value)["missing_rows"] == 1
    assert json.loads(row.unexpected_sample) == {"missing": [{"id": 2}], "extra": [{"id": 3}, {"id": 4}]}
    gone = lake_diff.Diff(lake_diff.UNVERIFIABLE, 9, reason="why").outcome()
    assert (gone.success, gone.unexpected_count, json.loads(gone.observed_value)) == (
        None, None, {"status": "unverifiable", "reason": "why"})
