"""Where the lake is, the cross-checks and the non-append advice (server/changelog/positions.py,
planner.py), on fake Iceberg tables: no Spark."""

from __future__ import annotations

import pytest

from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import planner, positions
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.planner import Plan, Registered, StreamCommit
from tierlake.server.exceptions import LakeHistoryError, LakeReplacedError, StreamReplacedError

LAKE = TablePath("shop_lake", "orders")
STREAM = TablePath("shop", "orders")


class Snap:
    def __init__(self, sid, parent, summary=None, seq=0, op="append"):
        self.sid, self.parent, self._summary, self.seq, self.op = sid, parent, summary or {}, seq, op

    def snapshotId(self):
        return self.sid

    def parentId(self):
        return self.parent

    def summary(self):
        return self._summary


class Table:
    def __init__(self, snaps, current, props=None, uuid="u-1"):
        self.snaps, self.current, self.props, self._uuid = {s.sid: s for s in snaps}, current, props or {}, uuid

    def currentSnapshot(self):
        return self.snaps.get(self.current)

    def snapshot(self, sid):
        return self.snaps.get(sid)

    def properties(self):
        return self.props

    def uuid(self):
        return self._uuid

    def name(self):
        return str(LAKE)


def tiered(sid, parent, position):
    return Snap(sid, parent, {"tiering.source-position": str(position), "tiering.source-snapshot-id": "77"})


def test_the_newest_summary_in_main_wins_over_the_property():
    # main was rolled back to snapshot 1 after snapshot 2 recorded position 9 in the property
    table = Table([tiered(1, None, 5), tiered(2, 1, 9)], current=1, props={"tierlake.lake.tiered-position": "9"})
    assert positions.recorded_position(table, LAKE) == (5, 77, True)


def test_after_compaction_and_expiry_the_property_says_where_the_lake_is():
    # a replace commit whose parent (the last tiering commit) was expired
    table = Table([Snap(3, 2, {"operation": "replace"})], current=3,
                  props={"tierlake.lake.tiered-position": "12", "tierlake.lake.tiered-snapshot-id": "88"})
    assert positions.lake_position(table, LAKE) == (12, 88)


def test_an_expired_history_without_a_recorded_position_is_an_error_not_position_0():
    table = Table([Snap(3, 2)], current=3)
    with pytest.raises(LakeHistoryError, match=r"the lake table shop_lake.orders does not say which stream position"):
        positions.recorded_position(table, LAKE)


def test_a_lake_never_tiered_into_starts_at_0():
    assert positions.recorded_position(Table([], current=None), LAKE) == (0, None, False)
    assert positions.recorded_position(Table([Snap(1, None)], current=1), LAKE) == (0, None, False)


def test_the_coordinator_cross_checks_a_lake_that_recorded_nothing():
    positions.cross_check(LAKE, 0, False, None)
    positions.cross_check(LAKE, 0, False, Registered(0, None))
    positions.cross_check(LAKE, 3, True, Registered(7, None))  # lake rolled back: the lake's rows decide
    with pytest.raises(LakeHistoryError, match="coordinator recorded stream position 7"):
        positions.cross_check(LAKE, 0, False, Registered(7, None))


def test_a_re_created_stream_is_recognised_by_its_uuid():
    stream, lake = Table([], None, uuid="new"), Table([], None)
    positions.check_identity(STREAM, LAKE, stream, lake, Registered(3, "new"))
    positions.check_identity(STREAM, LAKE, stream, lake, Registered(3, None))  # registered before UUIDs were
    with pytest.raises(StreamReplacedError, match="was dropped and created again: its Iceberg table UUID is new"):
        positions.check_identity(STREAM, LAKE, stream, lake, Registered(3, "old"))
    lake.props["tierlake.lake.stream-uuid"] = "old"
    with pytest.raises(StreamReplacedError, match=r"holds rows of another stream table \(UUID old\)"):
        positions.check_identity(STREAM, LAKE, stream, lake, None)
    assert positions.position_properties(4, 9, "new") == {
        "tierlake.lake.tiered-position": "4", "tierlake.lake.tiered-snapshot-id": "9",
        "tierlake.lake.stream-uuid": "new"}


def commit(seq, op="append"):
    return StreamCommit(seq, 100 + seq, op, {"added-records": "2"}, 0)


def test_the_non_append_advice_takes_the_commit_out_and_keeps_every_later_append():
    later = [commit(5), commit(6, "replace")] + [commit(s) for s in range(7, 14)]
    text = planner.non_append_message(STREAM, commit(4, "delete"), 103, later)
    assert "snapshot 104 (operation 'delete', log position 4" in text
    assert "without losing any append (8 committed after it)" in text
    assert "CALL sys.drop_stream_commit('shop.orders', 104) and CALL sys.retry_tiering('shop.orders')" in text
    assert "rollback_to_snapshot('shop.orders', 103); CALL spark_catalog.system.cherrypick_snapshot(" \
           "'shop.orders', 105)" in text
    assert "cherrypick_snapshot('shop.orders', 106)" not in text  # a replace is not re-applied
    assert "(3 more appends, oldest first)" in text and len(text) < 2048
    first = planner.non_append_message(STREAM, commit(1, "overwrite"), None, [])
    assert "first commit and cannot be taken out" in first


def test_a_chunk_knows_a_replace_commit_rewrote_its_appends():
    plan = Plan(TableHandle.loaded(None, STREAM, LAKE, spec=TieredSpec()), 0, None, 9,
                commits=[commit(1), commit(2), commit(4)], start_snapshot_id=None, replaced=[3, 5])
    chunks = plan.chunks(max_rows=4)
    assert [(c.start_position, c.end_position, c.rewritten) for c in chunks] == [(0, 2, False), (2, 4, True)]
    assert chunks[1].snapshot_ids == [104]


def test_a_replaced_lake_table_is_an_error_not_a_silent_gap():
    props = {"tierlake.lake.tiered-position": "9", "tierlake.lake.tiered-lake-snapshot-id": "2"}
    # REPLACE TABLE … AS SELECT: old snapshots kept, main starts afresh at a root without a summary.
    table = Table([tiered(1, None, 5), tiered(2, 1, 9), Snap(3, None)], current=3, props=dict(props))
    with pytest.raises(LakeReplacedError, match=r"shop_lake.orders was replaced \(REPLACE TABLE or CREATE OR "
                                                r"REPLACE\).*no longer descends from lake snapshot 2.*position 9"):
        positions.recorded_position(table, LAKE)
    # REPLACE TABLE without data: no current snapshot at all.
    with pytest.raises(LakeReplacedError):
        positions.recorded_position(Table([tiered(2, None, 9)], current=None, props=dict(props)), LAKE)
    # The same properties after expiry cut main's history: the property is the position.
    cut = Table([Snap(4, 3, {"operation": "replace"})], current=4, props=dict(props))
    assert positions.recorded_position(cut, LAKE) == (9, None, True)
    # A position set by hand (no lake snapshot recorded) is trusted.
    by_hand = Table([Snap(3, None)], current=3, props={"tierlake.lake.tiered-position": "9"})
    assert positions.recorded_position(by_hand, LAKE) == (9, None, True)
