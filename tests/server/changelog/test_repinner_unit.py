"""The fresh-view re-pin thread (no JVM): coalescing, settling, stopping, serialising a table's re-pins."""

from __future__ import annotations

import threading
import time

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import TableHandle

# The fake refresh acts for this module's re-pinners only: a server started by integration tests in the
# same process re-pins its own tables through the patched function meanwhile.
MINE = object()


def handle(name: str) -> TableHandle:
    return TableHandle(MINE, TablePath("db", name), TablePath("db_lake", name))


def test_requests_for_a_table_coalesce_and_settle_waits_for_them(monkeypatch):
    started, release, calls = threading.Event(), threading.Event(), []

    def refresh(table):
        if table.spark is not MINE:
            return
        calls.append(str(table.stream))
        started.set()
        release.wait(10)

    monkeypatch.setattr(fresh_view, "refresh", refresh)
    repins = fresh_view.Repinner(spark=MINE)
    repins.schedule(handle("a"))
    assert started.wait(10)  # a's first re-pin is running
    for _ in range(5):  # rounds of a and b meanwhile
        repins.schedule(handle("a"))
        repins.schedule(handle("b"))
    assert not repins.settle(timeout=0.2)
    release.set()
    assert repins.settle(timeout=10)
    # One running, then one per table for everything that came in meanwhile.
    assert sorted(calls) == ["db.a", "db.a", "db.b"]
    repins.stop()
    assert not repins.thread.is_alive()


def test_a_failing_re_pin_is_logged_and_the_next_still_runs(monkeypatch, caplog):
    calls = []

    def refresh(table):
        if table.spark is not MINE:
            return
        calls.append(str(table.stream))
        if table.stream.table == "bad":
            raise RuntimeError("metastore down")

    monkeypatch.setattr(fresh_view, "refresh", refresh)
    repins = fresh_view.Repinner(spark=MINE)
    repins.schedule(handle("bad"))
    repins.schedule(handle("good"))
    assert repins.settle(timeout=10)
    assert calls == ["db.bad", "db.good"]
    assert "could not refresh the fresh view of db.bad" in caplog.text
    repins.stop()


def test_stop_runs_what_is_pending_and_later_requests_are_ignored(monkeypatch):
    calls = []
    monkeypatch.setattr(fresh_view, "refresh",
                        lambda table: calls.append(str(table.stream)) if table.spark is MINE else None)
    repins = fresh_view.Repinner(spark=MINE)
    repins.schedule(handle("a"))
    repins.stop()
    repins.schedule(handle("b"))
    time.sleep(0.1)
    assert calls == ["db.a"] and not repins.thread.is_alive()


def test_one_process_thread_per_spark_session():
    spark = object()
    try:
        first = fresh_view.repinner(spark)
        assert fresh_view.repinner(spark) is first
        assert fresh_view.repinner(object()) is not first  # a new session (tests restart Spark)
    finally:
        fresh_view.stop_repins()
        first.stop()
    assert fresh_view.settle(timeout=0.1)


def test_the_sessions_of_one_spark_share_one_re_pin_thread():
    """Round threads each have their own session of one SparkContext: alternating between them made a
    new re-pin thread each time, the old ones waiting forever."""

    class Session:
        def __init__(self, context):
            self.sparkContext = context

    context = object()
    one, two = Session(context), Session(context)
    before = {t.ident for t in threading.enumerate() if t.name == "tierlake-fresh-repin"}
    try:
        first = fresh_view.repinner(one)
        for _ in range(10):
            assert fresh_view.repinner(two) is first
            assert fresh_view.repinner(one) is first
        live = [t for t in threading.enumerate() if t.name == "tierlake-fresh-repin" and t.ident not in before]
        assert len(live) == 1
        other = fresh_view.repinner(Session(object()))  # another SparkContext: a new thread, the old one ends
        assert other is not first
        first.thread.join(5)
        assert not first.thread.is_alive()
    finally:
        fresh_view.stop_repins()


def test_a_tables_re_pins_and_drop_are_serialised(monkeypatch):
    # The lock a re-pin holds while it reads the lake and writes the view.
    stream = TablePath("db", "t")
    lock = fresh_view._pin_lock(stream)
    assert fresh_view._pin_lock(TablePath("DB", "T")) is lock  # names are case-insensitive
    assert fresh_view._pin_lock(TablePath("db", "u")) is not lock
    seen = []

    class Handle(TableHandle):
        def current_properties(self):  # the view property, read under the lock
            seen.append(lock.locked())
            return {}

    monkeypatch.setattr(fresh_view, "activate", lambda spark: None)  # no JVM here
    assert fresh_view.refresh(Handle(object(), stream, TablePath("db_lake", "t"))) is None
    assert seen == [True]


def test_pins_order_as_the_lake_moves_and_are_read_back_from_the_view_text():
    """A view's text carries its pin (fresh_view.sql.j2); re-pins compare pins by the lake snapshot's
    sequence number, then the position (a compaction's commit keeps the position), never by snapshot id."""
    older, compacted, newer = fresh_view.Pin(3, 10, 99), fresh_view.Pin(4, 10, 7), fresh_view.Pin(5, 12, 1)
    assert older < compacted < newer
    assert fresh_view.Pin(3, 10, 99) == fresh_view.Pin(3, 10, 1)  # the same lake snapshot, whatever id it names
    text = "SELECT l.`id` FROM `db_lake`.`t` VERSION AS OF 99 AS l /* tierlake-pin 3:10:99 */ UNION ALL SELECT 1"
    assert fresh_view.pin_of(text) == older and fresh_view.pin_of(text).lake_snapshot == 99
    assert fresh_view.pin_of("SELECT 1 /* no pin */") is None and fresh_view.pin_of(None) is None
    assert fresh_view.pin_of(f"/* tierlake-pin {fresh_view.Pin(0, 0, -1).text()} */") == fresh_view.Pin(0, 0, -1)
