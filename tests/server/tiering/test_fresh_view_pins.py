"""Fresh views through maintenance, failures and other processes (issue 40;
docs/tiering.md, "Fresh views"): what a user sees is the model of the lake
plus the pending changes, whatever ran meanwhile.

- a re-pin computed from an older lake read (a tiering service's, landing
  late) after the server truncated the log: the view keeps the newer pin
  and every row;
- ``table.datalake.snapshot.min-retained = 1``, maintenance between a round
  and its re-pin, a late re-pin racing it: the lake snapshot the view reads
  is kept, the view exact;
- a user's ``expire_snapshots`` on the stream (also of a table in
  ``Failed``, which no round re-pins): the view still answers exactly, with a
  full scan of the stream that its plan names;
- the differential test of test_fresh_views.py with these steps mixed in.

Rounds run in the test's thread (no worker). The other process of the first
case is played by a re-pin from tables loaded before the round (what a
re-pin thread holds while it renders); bench/soak_fresh_view_processes.py runs a
real tiering service.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.server.changelog.reference_model import Change, replay
from tests.server.tiering.conftest import assign, coordinator_state, run
from tests.server.tiering.test_fresh_views import commit_batches, create, force_round, paths, rows_of, view_text
from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.positions import lake_position
from tierlake.server.kv import log_retention
from tierlake.server.maintenance import tables as table_maintenance
from tierlake.server.runtime.session import iceberg_table

pytestmark = pytest.mark.integration

_counter = itertools.count()


def expected_rows(pk: bool, commits: list, logged: list) -> list[tuple]:
    return sorted(replay(commits, sequence_by=True).state.values()) if pk else sorted(logged)


def round_left_behind(spark, table: str, monkeypatch) -> None:
    """A round whose re-pin has not run yet (it runs after the report; maintenance runs before it)."""
    with monkeypatch.context() as m:
        m.setattr(fresh_view, "after_lake_commit", lambda table: None)
        force_round(spark, table)


def late_repin(spark, stale: TableHandle) -> int:
    """The re-pin of another process that read the lake when ``stale`` was loaded and lands now."""
    view = fresh_view.view_of(spark, stale.stream)
    return fresh_view._create_view(stale, view)


def loaded(spark, stream, lake) -> TableHandle:
    handle = TableHandle(spark, stream, lake)
    handle.stream_table, handle.lake_table, handle.properties  # noqa: B018 - loaded now
    return handle


def maintain_now(spark, stream, lake) -> list:
    """The table's maintenance as a worker runs it after a round, at the lake's position."""
    position = lake_position(iceberg_table(spark, lake.quoted))[0]
    return table_maintenance.maintain(TableHandle(spark, stream, lake), position, orphans=False)


def user_expires_stream(spark, table: str) -> None:
    """What a user may run: every stream snapshot but the current one expired."""
    spark.sql(f"CALL spark_catalog.system.expire_snapshots(table => '{table}', "
              "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)")


def explain(spark, query: str) -> str:
    return "\n".join(r[0] for r in spark.sql(f"EXPLAIN {query}").collect())


def test_a_late_repin_from_an_older_lake_read_never_moves_the_view_back(hive_cursor, spark):
    """Issue 40, finding 1: a re-pin rendered from the lake before two rounds lands after log
    retention re-pinned the view and removed the changelog up to the newer position."""
    table = create(hive_cursor, f"late{next(_counter)}", pk=False)
    stream, lake, fresh = paths(table)
    logged: list[tuple] = []
    commit_batches(spark, table, False, [[(1, 1.0, None)]], [], logged)
    force_round(spark, table)
    stale = loaded(spark, stream, lake)  # another process's re-pin reads the lake here ...
    for k in (2, 3):
        commit_batches(spark, table, False, [[(k, float(k), None)]], [], logged)
        force_round(spark, table)
    commit_batches(spark, table, False, [[(4, 4.0, None)]], [], logged)
    run(hive_cursor, f"ALTER TABLE {table} SET TBLPROPERTIES ('table.log.ttl'='0 s')")
    truncated = log_retention.apply(spark, stream)
    position = lake_position(iceberg_table(spark, lake.quoted))[0]
    assert truncated.log_start_position == position and truncated.expired_snapshots >= 2, truncated
    pin = fresh_view.current_pin(spark, parse_table_path(fresh))
    assert pin is not None and pin.position == position

    in_force = late_repin(spark, stale)  # ... and lands now
    assert rows_of(spark, fresh) == sorted(logged)
    assert in_force == position and fresh_view.current_pin(spark, parse_table_path(fresh)) == pin
    assert spark.sql(f"SELECT id FROM {table}").collect() == [(4,)]  # the log really was truncated


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_min_retained_1_maintenance_before_the_repin_keeps_what_the_view_reads(hive_cursor, spark,
                                                                              monkeypatch, pk):
    """Issue 40, finding 2: maintenance runs between a round and its re-pin; with
    ``min-retained = 1`` the lake snapshot the view reads was expired."""
    name = f"minret{next(_counter)}_{'pk' if pk else 'log'}"
    table = create(hive_cursor, name, pk)
    run(hive_cursor, f"ALTER TABLE {table} SET TBLPROPERTIES ('table.datalake.snapshot.min-retained'='1', "
                     "'table.datalake.snapshot.max-age'='1 ms', 'table.datalake.auto-compaction'='false')")
    stream, lake, fresh = paths(table)
    commits: list[list[Change]] = []
    logged: list[tuple] = []
    commit_batches(spark, table, pk, [[(1, 1.0, "+I"), (2, 2.0, None)]], commits, logged)
    force_round(spark, table)
    pinned = fresh_view.current_pin(spark, parse_table_path(fresh))
    stale = loaded(spark, stream, lake)
    commit_batches(spark, table, pk, [[(1, 5.0, "+U"), (3, 3.0, None)]], commits, logged)
    round_left_behind(spark, table, monkeypatch)
    commit_batches(spark, table, pk, [[(2, 0.0, "-D" if pk else None)]], commits, logged)

    def maintain():
        return {a.kind: a for a in maintain_now(spark, stream, lake)}

    # Its re-pin fails: the snapshot it still reads is kept.
    with monkeypatch.context() as m:
        m.setattr(fresh_view, "refresh", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("metastore down")))
        done = maintain()
    assert not done["expire_snapshots"].error, done["expire_snapshots"]
    assert rows_of(spark, fresh) == expected_rows(pk, commits, logged)
    assert fresh_view.current_pin(spark, parse_table_path(fresh)) == pinned
    assert iceberg_table(spark, lake.quoted).snapshot(pinned.lake_snapshot) is not None

    # Maintenance re-pins, then expires; a re-pin from before the round lands after it.
    done = maintain()
    assert done["expire_snapshots"].snapshots_expired >= 1, done["expire_snapshots"]
    assert iceberg_table(spark, lake.quoted).snapshot(pinned.lake_snapshot) is None
    now = fresh_view.current_pin(spark, parse_table_path(fresh))
    assert now > pinned
    late_repin(spark, stale)
    assert rows_of(spark, fresh) == expected_rows(pk, commits, logged)
    assert fresh_view.current_pin(spark, parse_table_path(fresh)) == now
    force_round(spark, table)
    assert rows_of(spark, fresh) == rows_of(spark, lake.quoted) == expected_rows(pk, commits, logged)


def fail_table(server, table: str) -> None:
    """The table goes ``Failed`` the way a worker reports a failed round."""
    from tierlake.server.clients.procedure_client import LocalClient

    client, job = LocalClient(server), "fails-" + uuid.uuid4().hex[:8]
    table_id, epoch = assign(client, job, table)
    client.call("heartbeat", job_id=job, failed_tables=[
        {"table_id": table_id, "tiering_epoch": epoch, "error_message": "test: a round failed"}])


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_user_expire_snapshots_on_the_stream_of_a_failed_table(server, hive_cursor, spark, pk):
    """Issue 40, finding 3: a user expires the stream's snapshots; the table is ``Failed``, so no round
    re-pins its view. The view answers exactly, reading the stream in full (its plan says so)."""
    name = f"uexp{next(_counter)}_{'pk' if pk else 'log'}"
    table = create(hive_cursor, name, pk)
    stream, lake, fresh = paths(table)
    commits: list[list[Change]] = []
    logged: list[tuple] = []
    commit_batches(spark, table, pk, [[(1, 1.0, None), (2, 2.0, None)]], commits, logged)
    force_round(spark, table)
    fail_table(server, table)
    assert coordinator_state(server, table).status.value == "Failed"
    commit_batches(spark, table, pk, [[(1, 7.0, "+U")], [(3, 3.0, None)], [(2, 0.0, "-D" if pk else None)]],
                   commits, logged)
    text = view_text(spark, fresh)
    assert "tierlake_inc" in text and "full scan" not in explain(spark, f"SELECT * FROM {fresh}")
    assert rows_of(spark, fresh) == expected_rows(pk, commits, logged)

    user_expires_stream(spark, table)
    assert view_text(spark, fresh) == text  # nobody re-pinned it
    assert "full scan" in explain(spark, f"SELECT * FROM {fresh}")
    assert rows_of(spark, fresh) == expected_rows(pk, commits, logged)
    commit_batches(spark, table, pk, [[(4, 4.0, None), (1, 8.0, "+U")]], commits, logged)
    assert rows_of(spark, fresh) == expected_rows(pk, commits, logged)
    # The lake keys whose pending change was expired with its snapshot are still taken out exactly.
    assert rows_of(spark, f"(SELECT * FROM {fresh} WHERE id = 1)") == [
        r for r in expected_rows(pk, commits, logged) if r[0] == 1]


def test_a_column_renamed_on_a_failed_tables_stream_is_read_after_the_servers_check(server, hive_cursor, spark):
    """Issue 40, finding 4: the view names the stream's columns, so a RENAME COLUMN on a table that no
    round re-pins (idle, or ``Failed``) made it fail; the server's periodic KV maintenance re-pins it."""
    from tierlake.server.maintenance import kv_tables as kv_maintenance

    table = create(hive_cursor, f"ren{next(_counter)}", pk=True)
    stream, lake, fresh = paths(table)
    commits: list[list[Change]] = []
    commit_batches(spark, table, True, [[(1, 1.0, None), (2, 2.0, None)]], commits, [])
    force_round(spark, table)
    fail_table(server, table)
    commit_batches(spark, table, True, [[(2, 5.0, "+U"), (3, 3.0, None)]], commits, [])
    # From another application: through the gateway the ALTER re-pins the view itself (server/tiering/ddl.py).
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN v TO amount")
    with pytest.raises(Exception, match="UNRESOLVED_COLUMN"):
        rows_of(spark, fresh)  # what users saw until the next round (never, for a Failed table)
    done = kv_maintenance.maintain(spark, server.config, stream, None, kv_maintenance.kv.utcnow())
    assert "fresh view re-pinned" in done
    assert rows_of(spark, fresh) == expected_rows(True, commits, [])  # the lake column keeps its name: v
    assert "fresh view re-pinned" not in kv_maintenance.maintain(spark, server.config, stream, None,
                                                                 kv_maintenance.kv.utcnow())


# The differential test (test_fresh_views.py) with maintenance and late re-pins between the steps.
change = st.tuples(st.sampled_from([1, 2, 3, 4]), st.sampled_from([1.0, 2.0]),
                   st.sampled_from(["+I", "+U", "-U", "-D", None]))
step = st.one_of(st.sampled_from(["round", "round, re-pin later", "user expires stream", "maintenance",
                                  "truncate log", "late re-pin"]),
                 st.lists(change, min_size=1, max_size=4))


EVERYTHING = [[(1, 1.0, "+I"), (2, 2.0, None)], "round", [(1, 2.0, "+U")], "round, re-pin later", "maintenance",
              "late re-pin", [(3, 1.0, None)], "user expires stream", [(2, 1.0, "-D")], "truncate log",
              "late re-pin"]


@example(steps=EVERYTHING, pk=True)
@example(steps=EVERYTHING, pk=False)
@settings(max_examples=4, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=3, max_size=7), pk=st.booleans())
def test_fresh_view_equals_the_model_through_maintenance_and_late_repins(hive_cursor, spark, monkeypatch,
                                                                        steps, pk):
    name = f"d{next(_counter)}_{'pk' if pk else 'log'}"
    table = create(hive_cursor, name, pk)
    run(hive_cursor, f"ALTER TABLE {table} SET TBLPROPERTIES ('table.datalake.snapshot.min-retained'='1', "
                     "'table.datalake.snapshot.max-age'='1 ms', 'table.datalake.stream.max-snapshots'='1', "
                     "'table.log.ttl'='0 s')")
    stream, lake, fresh = paths(table)
    commits: list[list[Change]] = []
    logged: list[tuple] = []
    stale = loaded(spark, stream, lake)
    expired = False  # a user expired the stream's changelog: rounds stop (the table goes Failed), the view answers
    for s in steps:
        if s == "round" and not expired:
            force_round(spark, table)
        elif s == "round, re-pin later" and not expired:
            round_left_behind(spark, table, monkeypatch)
        elif s == "user expires stream":
            user_expires_stream(spark, table)
            expired = True
        elif s == "maintenance":
            maintain_now(spark, stream, lake)
        elif s == "truncate log":
            log_retention.apply(spark, stream)
        elif s == "late re-pin":
            before = fresh_view.current_pin(spark, parse_table_path(fresh))
            late_repin(spark, stale)
            after = fresh_view.current_pin(spark, parse_table_path(fresh))
            assert before is None or after >= before, (before, after)
            stale = loaded(spark, stream, lake)
        elif isinstance(s, list):
            commit_batches(spark, table, pk, [s], commits, logged)
        assert rows_of(spark, fresh) == expected_rows(pk, commits, logged), f"after {s!r}"
    if not expired:
        force_round(spark, table)
        assert rows_of(spark, fresh) == rows_of(spark, lake.quoted) == expected_rows(pk, commits, logged)
