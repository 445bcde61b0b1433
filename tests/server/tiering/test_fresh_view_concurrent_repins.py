"""Two processes re-pin one fresh view at once (issue 50, "suspected from reading"):
the re-pin writes the view's metastore entry back whole — its view text, the
``tierlake_fresh_pin`` parameter, and the Iceberg view's ``metadata_location``
as it read it. A ``CREATE OR REPLACE VIEW`` of the same view by another process
(a tiering service's re-pin and the server's maintenance) that lands between
that read and that write is undone: the entry names an older Iceberg view
version again, and its text pins further back than the pin maintenance just
re-pinned and then expired the older lake snapshots behind.

The interleaving is made deterministic: process A (a re-pin rendered from a
lake read before the last round, as a re-pin thread holds it) is stopped
between its read of the entry and its write; meanwhile process B (the other
process: its own metastore client, its own in-process locks) runs the table's
maintenance, which re-pins the view and expires the lake snapshots the older
pins read. Then A writes. What a user sees afterwards: the view's rows (all of
them, read both ways), its pin (the newest, never moved back), and the entry
naming the newest Iceberg view version with that version's text.

- against a stock Hive 2.3 metastore service (tests/hive_metastore.py, no
  tierlake code inside: ``alter_table`` has no compare-and-set there; the
  re-pin takes Hive's lock on the view around its read-modify-write, the lock
  Iceberg's own view commits take);
- against the server's embedded metastore (CasAlterHandler.java refuses the
  stale write; no Hive lock is taken there);
- the lock itself (forced on the embedded metastore, whose lock store is
  Hive's): a re-pin does not write while another writer holds the view's
  lock, lands once it is released, and past its wait gives up keeping the
  pin in force; reads of pins do not wait behind it.

The stock case runs in a subprocess with its own server (one Spark per process).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from pathlib import Path
from unittest import mock
from urllib.parse import unquote, urlparse

import pytest

from tests.hive_metastore import scenario_on_stock_metastore

pytestmark = pytest.mark.integration



class _Hooked:
    """A metastore client whose first ``alter_table*`` made in thread ``owner`` runs ``hook`` first;
    it records the calls made in that thread."""

    def __init__(self, client, race: _Race):
        self._client, self._race = client, race

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if threading.get_ident() == self._race.owner:
            self._race.calls.append(name)
        if name.startswith("alter_table") and threading.get_ident() == self._race.owner:
            def hooked(*args):
                self._race.interleave()
                return attr(*args)
            return hooked
        return attr


class _Race:
    """Runs ``other`` (another process's work) between the owner thread's read of a view's
    metastore entry and its write; ``other`` gets a metastore client and in-process locks of its
    own (another process shares neither)."""

    def __init__(self, spark, view, other):
        from tierlake.server.changelog import fresh_view

        self.fresh_view, self.spark, self.view, self.other = fresh_view, spark, view, other
        self.owner: int | None = None
        self.calls: list[str] = []
        self.fired = False
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self.thread: threading.Thread | None = None
        self.waited_for_lock = False
        self._patches: list = []

    def __enter__(self) -> _Race:
        original = self.fresh_view._with_metastore
        self.owner = threading.get_ident()
        patch = mock.patch.object(self.fresh_view, "_with_metastore", lambda spark, use, **kw: original(
            spark, lambda client: use(_Hooked(client, self)), **kw))
        patch.start()
        self._patches.append(patch)
        return self

    def interleave(self) -> None:
        if self.fired:
            return
        self.fired = True
        # From here on the module's client and its mutex are the other process's.
        for name, value in (("_metastore_lock", threading.Lock()), ("_metastore", []),
                            ("_locking_metastore_lock", threading.Lock()), ("_locking_metastore", [])):
            patch = mock.patch.object(self.fresh_view, name, value)
            patch.start()
            self._patches.append(patch)
        self.thread = threading.Thread(target=self._other, name="other-process", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.done.wait(0.2) and time.monotonic() < deadline:
            if self._lock_waiting():  # it waits for the lock this re-pin holds: let this one write
                self.waited_for_lock = True
                return

    def _other(self) -> None:
        try:
            self.other()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)
        finally:
            self.done.set()

    def _lock_waiting(self) -> bool:
        """Whether a Hive lock request on the view waits (an Iceberg commit of the other process)."""
        jvm = self.spark.sparkContext._jvm
        try:
            client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(jvm.org.apache.hadoop.hive.conf.HiveConf(
                self.spark._jsc.hadoopConfiguration(),
                jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf")))
        except Exception:  # noqa: BLE001
            return False
        try:
            request = jvm.org.apache.hadoop.hive.metastore.api.ShowLocksRequest()
            request.setDbname(self.view.database)
            request.setTablename(self.view.table)
            return any(str(e.getState()) == "WAITING" for e in client.showLocks(request).getLocks())
        except Exception:  # noqa: BLE001 - a metastore without lock tables: nothing waits
            return False
        finally:
            client.close()

    def __exit__(self, *exc) -> None:
        if self.thread is not None:
            self.thread.join(300)
        mine = self.fresh_view._metastore + self.fresh_view._locking_metastore if self.fired else []
        for patch in reversed(self._patches):
            patch.stop()
        for _, client in mine:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass


def race_of_two_repins(spark, cursor, name: str) -> dict:
    """The scenario of the module docstring on a log table; what a user sees afterwards."""
    from tests.server.tiering.conftest import run
    from tests.server.tiering.test_fresh_view_pins import loaded, maintain_now
    from tests.server.tiering.test_fresh_views import commit_batches, create, force_round, paths, rows_of, view_text
    from tierlake.server.catalog.table_path import parse_table_path
    from tierlake.server.changelog import fresh_view
    from tierlake.server.changelog.positions import lake_position
    from tierlake.server.runtime.session import iceberg_table

    table = create(cursor, name, pk=False)
    run(cursor, f"ALTER TABLE {table} SET TBLPROPERTIES ('table.datalake.snapshot.min-retained'='1', "
                "'table.datalake.snapshot.max-age'='1 ms', 'table.datalake.auto-compaction'='false')")
    stream, lake, fresh = paths(table)
    view = parse_table_path(fresh)
    logged: list[tuple] = []

    def round_left_behind() -> None:  # a round whose re-pin has not run yet
        with mock.patch.object(fresh_view, "after_lake_commit", lambda table: None):
            force_round(spark, table)

    commit_batches(spark, table, False, [[(1, 1.0, None)]], [], logged)
    force_round(spark, table)
    first = fresh_view.current_pin(spark, view)
    commit_batches(spark, table, False, [[(2, 2.0, None)]], [], logged)
    round_left_behind()
    stale = loaded(spark, stream, lake)  # A's re-pin reads the lake here ...
    commit_batches(spark, table, False, [[(3, 3.0, None)]], [], logged)
    round_left_behind()
    commit_batches(spark, table, False, [[(4, 4.0, None)]], [], logged)

    # ... and writes the entry after B's maintenance re-pinned the view and expired the older snapshots.
    with _Race(spark, view, lambda: maintain_now(spark, stream, lake)) as race:
        fresh_view._create_view(stale, view)
    assert race.fired, "the re-pin never wrote the view's entry"
    assert not race.errors, race.errors

    lake_table = iceberg_table(spark, lake.quoted)
    try:
        rows, error = rows_of(spark, fresh), None
    except Exception as e:  # noqa: BLE001 - what the user gets instead of rows
        rows, error = None, f"{type(e).__name__}: {str(e)[:500]}"
    pin = fresh_view.current_pin(spark, view)
    jvm = spark.sparkContext._jvm
    client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark._jsc.hadoopConfiguration(), jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf")))
    try:
        entry = client.getTable(view.database, view.table)
        location = str(entry.getParameters().get("metadata_location"))
        entry_text = str(entry.getViewOriginalText())
        locks = jvm.org.apache.hadoop.hive.metastore.api.ShowLocksRequest()
        locks.setDbname(view.database)
        locks.setTablename(view.table)
        try:
            locks_left = len(client.showLocks(locks).getLocks())
        except Exception:  # noqa: BLE001 - a metastore without lock tables holds none
            locks_left = 0
    finally:
        client.close()
    directory = Path(unquote(urlparse(location).path)).parent
    versions = sorted((int(m.group(1)), f) for f in os.listdir(directory)
                      if (m := re.match(r"(\d+)-.*\.metadata\.json$", f)))
    namespace = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 1)
    namespace[0] = view.database
    iceberg_text = str(spark._jsparkSession.sessionState().catalogManager().catalog("spark_catalog").loadView(
        jvm.org.apache.spark.sql.connector.catalog.Identifier.of(namespace, view.table)).query())
    return {
        "expected_rows": sorted(logged),
        "rows": rows,
        "error": error,
        "first_pin": None if first is None else first.text(),
        "pin": None if pin is None else [pin.lake_sequence, pin.position, pin.lake_snapshot],
        "lake_pin": [int(lake_table.currentSnapshot().sequenceNumber()), lake_position(lake_table)[0],
                     int(lake_table.currentSnapshot().snapshotId())],
        "entry_metadata": Path(unquote(urlparse(location).path)).name,
        "newest_metadata": versions[-1][1],
        "entry_text_is_icebergs": entry_text == iceberg_text,
        "shown_text_is_entrys": view_text(spark, fresh).count("tierlake-pin") == 1
        and fresh_view.pin_of(view_text(spark, fresh)) == pin,
        "waited_for_lock": race.waited_for_lock,
        "locks_left": locks_left,
        "client_calls": race.calls,
    }


def check(result: dict) -> None:
    assert result["error"] is None, f"the fresh view fails after the concurrent re-pins: {result['error']}"
    assert result["rows"] is not None and [tuple(r) for r in result["rows"]] == [
        tuple(r) for r in result["expected_rows"]], result
    assert result["pin"] == result["lake_pin"], f"the view's pin moved back: {result}"
    assert result["entry_metadata"] == result["newest_metadata"], \
        f"the metastore entry names an older Iceberg view version: {result}"
    assert result["entry_text_is_icebergs"] and result["shown_text_is_entrys"], result
    assert result["locks_left"] == 0, f"a lock on the view was left behind: {result}"


def _stock_race(server) -> dict:
    """The subprocess's scenario (tests/hive_metastore.py): the race on the stock metastore."""
    from pyhive import hive

    conn = hive.connect("127.0.0.1", server.gateway.port, username="tester")
    try:
        return race_of_two_repins(server.spark, conn.cursor(), "stock_race")
    finally:
        conn.close()


def test_concurrent_repins_through_a_stock_hive_metastore_never_move_the_view_back(tmp_path):
    result = scenario_on_stock_metastore(tmp_path, __name__, "_stock_race")
    check(result)
    # The other process's replace waited for this re-pin's lock instead of landing inside it.
    assert result["waited_for_lock"], result


def test_concurrent_repins_on_the_embedded_metastore_never_move_the_view_back(hive_cursor, spark):
    result = race_of_two_repins(spark, hive_cursor, f"embedded_race_{uuid.uuid4().hex[:6]}")
    print(result)
    check(result)
    # The other process's re-pin and expiry ran whole between this re-pin's read and its write.
    assert not result["waited_for_lock"], result
    # The embedded metastore's compare-and-set keeps it right without Hive's locks (no lock round trips).
    assert "lock" not in result["client_calls"], result["client_calls"]


def _hold_view_lock(spark, view):
    """Another writer's EXCLUSIVE Hive lock on the view (what Iceberg's view commit holds while it commits);
    returns (client, lock id)."""
    jvm = spark.sparkContext._jvm
    api = jvm.org.apache.hadoop.hive.metastore.api
    client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark._jsc.hadoopConfiguration(), jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf")))
    component = api.LockComponent(api.LockType.EXCLUSIVE, api.LockLevel.TABLE, view.database)
    component.setTablename(view.table)
    components = jvm.java.util.ArrayList()
    components.add(component)
    response = client.lock(api.LockRequest(components, "other", "elsewhere"))
    assert str(response.getState()) == "ACQUIRED", response
    return client, response.getLockid()


def _locks_on(spark, view) -> int:
    jvm = spark.sparkContext._jvm
    client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark._jsc.hadoopConfiguration(), jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf")))
    try:
        request = jvm.org.apache.hadoop.hive.metastore.api.ShowLocksRequest()
        request.setDbname(view.database)
        request.setTablename(view.table)
        return len(client.showLocks(request).getLocks())
    finally:
        client.close()


def test_a_repin_waits_for_another_writers_lock_on_the_view_and_gives_up_keeping_its_pin(hive_cursor, spark):
    """The locking protocol of a metastore service or shared database (forced here on this JVM's
    metastore, whose lock store is Hive's): while another writer holds the view's lock the re-pin does
    not write; it lands once the lock is released; past its wait it fails, and the pin in force stays
    with the view exact and no lock of its own left behind."""
    from tests.server.tiering.test_fresh_views import commit_batches, create, force_round, paths, rows_of
    from tierlake.server.catalog.table_path import parse_table_path
    from tierlake.server.changelog import fresh_view
    from tierlake.server.changelog.handle import TableHandle
    from tierlake.server.exceptions import ConcurrentUpdateError

    table = create(hive_cursor, f"lock_wait_{uuid.uuid4().hex[:6]}", pk=False)
    stream, lake, fresh = paths(table)
    view = parse_table_path(fresh)
    logged: list[tuple] = []
    commit_batches(spark, table, False, [[(1, 1.0, None)]], [], logged)
    force_round(spark, table)
    first = fresh_view.current_pin(spark, view)
    for k in (2, 3):
        commit_batches(spark, table, False, [[(k, float(k), None)]], [], logged)
        with mock.patch.object(fresh_view, "after_lake_commit", lambda table: None):
            force_round(spark, table)

    with mock.patch.object(fresh_view, "_views_locked", lambda spark: True):
        # Past its wait: fails, the pin in force stays, the view exact, no lock of its own left.
        holder, lock = _hold_view_lock(spark, view)
        try:
            with mock.patch.object(fresh_view, "VIEW_LOCK_TIMEOUT_S", 2.0), \
                    pytest.raises(ConcurrentUpdateError, match="was not granted"):
                fresh_view.refresh(TableHandle(spark, stream, lake))
            assert fresh_view.current_pin(spark, view) == first
            assert rows_of(spark, fresh) == sorted(logged)
            assert _locks_on(spark, view) == 1  # the holder's only

            # Released while the re-pin waits: it lands then, not before.
            done: list = []
            repin = threading.Thread(target=lambda: done.append(fresh_view.refresh(TableHandle(spark, stream, lake))))
            repin.start()
            time.sleep(3)
            started = time.monotonic()
            assert repin.is_alive() and fresh_view.current_pin(spark, view) == first, "wrote under another's lock"
            # The process's reads of pins (maintenance's among them) do not wait behind a waiting re-pin.
            assert time.monotonic() - started < 10
        finally:
            holder.unlock(lock)
            holder.close()
        repin.join(120)
        assert not repin.is_alive() and done, "the re-pin did not land once the lock was released"
    pin = fresh_view.current_pin(spark, view)
    assert pin > first and done == [pin.position]
    assert rows_of(spark, fresh) == sorted(logged)
    assert _locks_on(spark, view) == 0
