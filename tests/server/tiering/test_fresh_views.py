"""Fresh views (docs/tiering.md, "Fresh views"): ``<db>_fresh.<table>`` reads
the lake plus the changes committed after the tiered position.

- generated append/change batches with rounds at random moments: at every
  step the fresh view equals the reference model of everything committed
  (log: every row; primary-key: tests/server/changelog/reference_model.py);
  after a forced round it equals the lake table row for row;
- rounds committing in a loop while queries run in a loop: a monotone counter
  column is never seen twice and never with a gap;
- the views are listed by GetTables (what Hive JDBC's getTables sends) and
  ``SHOW VIEWS``, move with a renamed table and go away with the table;
- the stream part opens only the files committed after the position: with
  every tiered stream file moved away the view still answers (the full scan
  fails), and the rows it reads from the stream are the pending ones only;
- a view whose start snapshot's child was expired reads the stream in full
  (its plan says so) and is a full scan when re-pinned (more of this in
  test_fresh_view_pins.py); stream snapshot expiry and log retention re-pin a
  view left behind (its re-pin still pending, or failed) before they remove
  what that view reads.

Rounds run in the test's thread (no worker), so "a round at a random moment"
is a step hypothesis chooses.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import threading
from urllib.parse import unquote, urlparse

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.server.changelog.reference_model import Change, replay
from tests.server.tiering.conftest import handle, run
from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.changelog import fresh_view, planner
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.jvm import FRESH_LOCAL_ROWS_CONF
from tierlake.server.changelog.positions import lake_position
from tierlake.server.maintenance import tables as table_maintenance
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.tiering.round import run_round

pytestmark = pytest.mark.integration

DB = "fresh_views"
_counter = itertools.count()


def force_round(spark, table: str, chunk_rows: int = 1_000_000) -> None:
    """One round of ``table`` now, in this thread (what a worker does, without the coordinator)."""
    run_round(planner.plan_round(handle(spark, table, chunk_rows, job_id="test")), check_epoch=lambda: None)
    assert fresh_view.settle()  # the round's re-pin, which runs behind it


def create(cursor, name: str, pk: bool) -> str:
    run(cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h'"
    if pk:
        props += ", 'primary-key'='id', 'bucket.num'='2', 'sequence-by'='seq'"
    run(cursor, f"CREATE TABLE {DB}.{name} (id BIGINT, v DOUBLE, seq BIGINT) TBLPROPERTIES ({props})")
    return f"{DB}.{name}"


def literal(value) -> str:
    return "NULL" if value is None else repr(value)


def rows_of(spark, table: str) -> list[tuple]:
    """The table's rows; a fresh view is read both ways, which must agree: its pending changes merged
    in the driver while the query is planned (FreshMerge.java, the default for few pending rows) and
    merged by Spark (its distributed form, forced by a local-merge limit of 0)."""
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT id, v, seq FROM {table}").collect())
    if f"{DB}_fresh." in table:
        with local_merge_rows(spark, 0):
            distributed = sorted(tuple(r) for r in spark.sql(f"SELECT id, v, seq FROM {table}").collect())
        assert distributed == rows, f"{table}: merged by Spark {distributed}, in the driver {rows}"
    return rows


@contextlib.contextmanager
def local_merge_rows(spark, limit: int):
    """This session's ``tierlake.fresh.local-merge-rows`` (FreshMerge reads it at planning)."""
    before = spark.conf.get(FRESH_LOCAL_ROWS_CONF)
    spark.conf.set(FRESH_LOCAL_ROWS_CONF, str(limit))
    try:
        yield
    finally:
        spark.conf.set(FRESH_LOCAL_ROWS_CONF, before)


# A batch: (key, value, change type); a primary-key batch orders its changes
# by the sequence-by column (its position in the batch), so none is ambiguous.
change = st.tuples(st.sampled_from([1, 2, 3, 4]), st.sampled_from([1.0, 2.0]),
                   st.sampled_from(["+I", "+U", "-U", "-D", None]))
step = st.one_of(st.just("round"), st.lists(change, min_size=1, max_size=4))


@settings(max_examples=3, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=2, max_size=4), pk=st.booleans())
def test_fresh_view_equals_everything_committed_then_the_lake(hive_cursor, spark, steps, pk):
    name = f"t{next(_counter)}_{'pk' if pk else 'log'}"
    table = create(hive_cursor, name, pk)
    fresh, lake = f"{DB}_fresh.{name}", f"{DB}_lake.{name}"
    commits: list[list[Change]] = []
    logged: list[tuple] = []
    for s in steps:
        if s == "round":
            force_round(spark, table)
        else:
            commit_batches(spark, table, pk, [s], commits, logged)
        expected = sorted(replay(commits, sequence_by=True).state.values()) if pk else sorted(logged)
        assert rows_of(spark, fresh) == expected, f"after {s!r}"
    force_round(spark, table)
    assert rows_of(spark, fresh) == rows_of(spark, lake) == expected


def test_the_last_change_per_key_wins_across_and_within_pending_commits(hive_cursor, spark):
    """Several pending commits change the same keys: a later commit wins over a larger sequence-by
    value of an earlier one, within a commit the larger sequence-by value wins, -U rows are no
    change of their own, a -D removes the lake's row; both forms of the view (rows_of)."""
    name = f"order{next(_counter)}"
    table = create(hive_cursor, name, pk=True)
    commits: list[list[Change]] = []
    commit_batches(spark, table, True, [[(1, 1.0, "+I"), (2, 1.0, "+I"), (3, 1.0, "+I"), (4, 1.0, "+I")]],
                   commits, [])
    force_round(spark, table)
    commit_batches(spark, table, True, [
        [(9, 0.5, "+I"), (1, 2.0, "+U"), (2, 2.0, "+U")],   # key 1 at sequence-by 1
        [(1, 3.0, "+U"), (2, 4.0, "+U"), (2, 5.0, "+U")],   # key 1 at 0: the later commit still wins
        [(3, 6.0, "+U"), (3, 1.0, "-U"), (4, 0.0, "-D")],
    ], commits, [])
    stream, lake, fresh = paths(table)
    expected = sorted(replay(commits, sequence_by=True).state.values())
    assert expected == [(1, 3.0, 0), (2, 5.0, 2), (3, 6.0, 0), (9, 0.5, 0)]
    assert rows_of(spark, fresh) == expected
    assert sorted(spark.sql(f"SELECT id, v FROM {fresh} WHERE id IN (1, 4)").collect()) == [(1, 3.0)]


def optimized(spark, query: str) -> str:
    return spark.sql(query)._jdf.queryExecution().optimizedPlan().toString()


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_what_is_not_pending_is_planned_as_the_lake_query(hive_cursor, spark, pk):
    """Nothing pending: the view's plan is the lake's (no stream read, join or window). Pending
    changes: a lookup of a key that none of them touches is still planned as the lake's."""
    name = f"plan{next(_counter)}_{'pk' if pk else 'log'}"
    table = create(hive_cursor, name, pk)
    stream, lake, fresh = paths(table)
    commits: list[list[Change]] = []
    logged: list[tuple] = []
    commit_batches(spark, table, pk, [[(1, 1.0, "+I"), (2, 1.0, "+I")]], commits, logged)
    force_round(spark, table)
    for query in (f"SELECT * FROM {fresh}", f"SELECT count(*) FROM {fresh}", f"SELECT * FROM {fresh} WHERE id = 2"):
        plan = optimized(spark, query)
        assert not any(word in plan for word in ("Join", "Window", "Union", "tierlake_inc", "LocalRelation")), plan
        assert f"{lake.database}.{lake.table}" in plan
        # Already so once the view is resolved (FreshMerge.NothingPending): the optimizer's rules
        # run over the lake query alone.
        assert "tierlake_inc" not in analyzed(spark, query)
    commit_batches(spark, table, pk, [[(3, 3.0, "+I")]], commits, logged)
    assert "tierlake_inc" in analyzed(spark, f"SELECT * FROM {fresh}")
    plan = optimized(spark, f"SELECT * FROM {fresh} WHERE id = 2")
    assert not any(word in plan for word in ("Join", "Window", "Union", "tierlake_inc", "LocalRelation")), plan
    # A pending key: no stream read and no join (the pending keys are a set the lake's scan tests:
    # FreshMerge.SmallAntiJoin), one Spark job.
    plan = optimized(spark, f"SELECT * FROM {fresh} WHERE id = 3")
    assert "LocalRelation" in plan and not any(word in plan for word in ("tierlake_inc", "Join")), plan
    # Every row, counted: the lake part alone plus the pending row's share (FreshMerge.LocalAggregates).
    plan = optimized(spark, f"SELECT count(*) FROM {fresh}")
    assert "+ 1)" in plan and not any(word in plan for word in ("tierlake_inc", "Join", "Union", "LocalRelation")), plan
    if pk:  # a BIGINT key: a set of primitive longs (KeySet.java), not Spark's InSet of boxed values
        for query in (f"SELECT * FROM {fresh} WHERE id = 3", f"SELECT count(*) FROM {fresh}"):
            plan = optimized(spark, query)
            assert "pending keys (1)" in plan and "INSET" not in plan.upper(), plan
    assert rows_of(spark, f"(SELECT * FROM {fresh} WHERE id >= 2)") == [(2, 1.0, 1), (3, 3.0, 0)]


def analyzed(spark, query: str) -> str:
    return spark.sql(query)._jdf.queryExecution().analyzed().toString()


# {t}: the fresh view, or the same rows as a plain view (the expected answer).
AGGREGATES = [
    ("SELECT count(*) FROM {t}", True),
    ("SELECT count(*), count(v), sum(id), sum(v), min(v), max(v), min(id), max(seq), "
     "min(CAST(id AS STRING)), max(CAST(v AS STRING)) FROM {t}", True),
    ("SELECT count(*) + 1, sum(v) * 2, max(id) - min(id) FROM {t}", True),
    ("SELECT count(*), sum(v), min(v), max(id) FROM {t} WHERE id >= 100", True),  # pending rows only
    ("SELECT count(*), sum(v), max(id) FROM {t} WHERE id > 100000", True),  # no row at all
    ("SELECT count(*), count(v), sum(v) FROM {t} WHERE v IS NULL OR v > 2", True),
    ("SELECT avg(v), count(DISTINCT v) FROM {t}", False),  # not split: left to Spark's union
    ("SELECT id % 2 AS g, count(*), sum(v) FROM {t} GROUP BY id % 2 ORDER BY g", False),
]


def test_an_aggregate_over_any_union_with_literal_rows_is_exact(spark):
    """LocalAggregates is an optimizer rule of the whole server: any such query, not only a fresh
    view's, gives the union's answer (here against values worked out by hand)."""
    union = "(SELECT id FROM range(10) UNION ALL SELECT * FROM VALUES (100L), (NULL) AS t(id))"
    query = f"SELECT count(*), count(id), sum(id), min(id), max(id), sum(id * 0.5D) FROM {union}"
    assert [tuple(r) for r in spark.sql(query).collect()] == [(12, 11, 145, 0, 100, 72.5)]
    assert "Union" not in optimized(spark, query)
    assert [tuple(r) for r in spark.sql(f"SELECT count(*), sum(id), min(id) FROM {union} WHERE id > 50").collect()] \
        == [(1, 100, 100)]
    assert [tuple(r) for r in spark.sql(f"SELECT count(*), sum(id) FROM {union} WHERE id > 500").collect()] \
        == [(0, None)]


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_aggregates_over_the_view_count_the_pending_rows_once(hive_cursor, spark, pk):
    """An aggregate without GROUP BY over a view whose pending changes were merged in the driver
    is computed over the lake part alone, the pending rows' share added as a constant
    (FreshMerge.LocalAggregates): the same answer as the aggregate over the view's rows, and as its
    distributed form (a local-merge limit of 0); with no Union left in the plan where it splits."""
    name = f"agg{next(_counter)}_{'pk' if pk else 'log'}"
    table = create(hive_cursor, name, pk)
    stream, lake, fresh = paths(table)
    commits: list[list[Change]] = []
    logged: list[tuple] = []
    commit_batches(spark, table, pk, [[(1, 1.5, "+I"), (2, 2.5, "+I"), (3, 3.5, "+I"), (4, 4.5, "+I")]],
                   commits, logged)
    force_round(spark, table)
    commit_batches(spark, table, pk, [
        [(1, 10.5, "+U"), (2, 0.5, "-D"), (100, 7.5, "+I"), (3, 3.5, "-U")],
        [(101, 0.25, "+I"), (1, 11.5, "+U")],
    ], commits, logged)
    if pk:
        spark.sql(f"INSERT INTO {table} (id, v, seq, _change_type) VALUES (102, NULL, 9, '+I')")
    else:
        spark.sql(f"INSERT INTO {table} VALUES (102, NULL, 9)")
    rows = rows_of(spark, fresh)
    spark.createDataFrame(rows, "id BIGINT, v DOUBLE, seq BIGINT").createOrReplaceTempView(f"model_{name}")
    for query, splits in AGGREGATES:
        expected = [tuple(r) for r in spark.sql(query.format(t=f"model_{name}")).collect()]
        local = [tuple(r) for r in spark.sql(query.format(t=fresh)).collect()]
        with local_merge_rows(spark, 0):
            distributed = [tuple(r) for r in spark.sql(query.format(t=fresh)).collect()]
        assert local == distributed == expected, query
        plan = optimized(spark, query.format(t=fresh))
        assert ("Union" not in plan) == splits, (query, plan)


@pytest.mark.parametrize("key_type, keys, primitive", [
    ("INT", ["1", "2", "3", "-2147483648"], True),
    ("SMALLINT", ["CAST(1 AS SMALLINT)", "CAST(2 AS SMALLINT)", "CAST(3 AS SMALLINT)", "CAST(-7 AS SMALLINT)"], True),
    ("BIGINT", ["1", "2", "3", "-9223372036854775808"], True),
    ("DATE", ["DATE'2026-01-01'", "DATE'2026-01-02'", "DATE'2026-01-03'", "DATE'1969-12-31'"], True),
    ("TIMESTAMP", ["TIMESTAMP'2026-01-01 00:00:01'", "TIMESTAMP'2026-01-01 00:00:02'",
                   "TIMESTAMP'2026-01-01 00:00:03'", "TIMESTAMP'1969-12-31 23:59:59'"], True),
    ("STRING", ["'a'", "'b'", "'c'", "''"], False),
    ("DECIMAL(10, 2)", ["1.50", "2.50", "3.50", "-0.01"], False),
])
def test_pending_keys_of_every_key_type_replace_the_lake_rows(hive_cursor, spark, key_type, keys, primitive):
    """The lake rows whose keys have pending changes are left out by a key set the lake scan tests: for
    integral, date and timestamp keys a set of primitive longs (a date in days, a timestamp in
    microseconds, the smallest long included), for others Spark's own InSet; both give the rows of
    the distributed merge."""
    name = f"keys{next(_counter)}"
    run(hive_cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    run(hive_cursor, f"CREATE TABLE {DB}.{name} (k {key_type}, v DOUBLE) TBLPROPERTIES ("
                     "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h', 'primary-key'='k', "
                     "'bucket.num'='2')")
    table, fresh = f"{DB}.{name}", f"{DB}_fresh.{name}"
    a, b, c, d = keys
    spark.sql(f"INSERT INTO {table} VALUES ({a}, 1.0, NULL), ({b}, 2.0, NULL), ({c}, 3.0, NULL)")
    force_round(spark, table)
    spark.sql(f"INSERT INTO {table} VALUES ({b}, 20.0, '+U'), ({c}, NULL, '-D'), ({d}, 4.0, '+I')")
    query = f"SELECT k, v FROM {fresh}"
    plan = optimized(spark, query)
    assert ("pending keys (3)" in plan) == primitive and ("INSET" in plan.upper()) != primitive, plan
    local = sorted(tuple(r) for r in spark.sql(query).collect())
    with local_merge_rows(spark, 0):
        distributed = sorted(tuple(r) for r in spark.sql(query).collect())
    expected = sorted(tuple(r) for r in spark.sql(
        f"SELECT * FROM VALUES ({a}, 1.0), ({b}, 20.0), ({d}, 4.0) AS t(k, v)").collect())
    assert local == distributed == expected


def test_no_row_twice_or_missed_while_rounds_commit(hive_cursor, spark):
    """A writer appends counter values 1, 2, 3, … (one commit each), rounds commit
    in a loop; every query of the fresh view sees exactly 1..n for some n."""
    table = create(hive_cursor, f"counter{next(_counter)}", pk=False)
    fresh = f"{DB}_fresh.{table.split('.')[1]}"
    stop, errors = threading.Event(), []
    written = [0]

    def loop(fn):
        def body():
            try:
                while not stop.is_set():
                    fn()
            except Exception as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
                stop.set()
        return threading.Thread(target=body, daemon=True)

    def write():
        n = written[0] + 1
        spark.sql(f"INSERT INTO {table} VALUES ({n}, 0.0, {n})")
        written[0] = n

    threads = [loop(write), loop(lambda: force_round(spark, table))]
    for t in threads:
        t.start()
    seen, rounds_seen = [], set()
    try:
        # Until the queries overlapped several lake commits (bounded: a stuck round fails the test below).
        while (len(rounds_seen) < 4 or len(seen) < 6) and len(seen) < 40 and not stop.is_set():
            floor = written[0]
            ((count, distinct, low, high),) = run(
                hive_cursor, f"SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM {fresh}")
            assert count == distinct, f"a counter value seen twice: {count} rows, {distinct} distinct"
            assert count == 0 or (low, high) == (1, count), f"a gap: {count} rows from {low} to {high}"
            assert count >= floor, f"{floor} values were committed before the query, it saw {count}"
            seen.append(count)
            lake_head = iceberg_table(spark, f"{DB}_lake.{table.split('.')[1]}").currentSnapshot()
            rounds_seen.add(None if lake_head is None else int(lake_head.snapshotId()))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=300)
    assert not errors, errors
    assert len(rounds_seen) >= 4, "the queries did not overlap with several lake commits"
    assert seen == sorted(seen) and seen[-1] > seen[0]


def _get_tables(server, schema: str) -> dict[str, str]:
    from pyhive import hive
    from TCLIService import ttypes

    conn = hive.connect("127.0.0.1", server.gateway.port, username="meta")
    try:
        req = ttypes.TGetTablesReq(sessionHandle=conn._sessionHandle, schemaName=schema, tableName="%")
        resp = conn.client.GetTables(req)
        assert resp.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
        fetch = conn.client.FetchResults(
            ttypes.TFetchResultsReq(operationHandle=resp.operationHandle, orientation=0, maxRows=1000))
        columns = fetch.results.columns
        return dict(zip(columns[2].stringVal.values, columns[3].stringVal.values, strict=True))
    finally:
        conn.close()


def test_views_are_listed_and_go_away_with_the_table(server, spark, hive_cursor):
    shop = f"shop{next(_counter)}"
    run(hive_cursor, f"CREATE DATABASE {shop}")
    run(hive_cursor, f"CREATE TABLE {shop}.orders (id BIGINT, v DOUBLE) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2')")
    run(hive_cursor, f"CREATE TABLE {shop}.events (id BIGINT) USING iceberg")
    run(hive_cursor, f"CALL sys.enable_tiering('{shop}.events')")
    assert _get_tables(server, f"{shop}_fresh") == {"orders": "VIEW", "events": "VIEW"}
    assert sorted(r[1] for r in run(hive_cursor, f"SHOW VIEWS IN {shop}_fresh")) == ["events", "orders"]
    run(hive_cursor, f"INSERT INTO {shop}.orders (id, v, _change_type) VALUES (1, 1.0, '+I'), (2, 2.0, NULL)")
    rows = run(hive_cursor, f"SELECT id, v FROM {shop}_fresh.orders ORDER BY id")
    assert [tuple(r) for r in rows] == [(1, 1.0), (2, 2.0)]

    run(hive_cursor, f"ALTER TABLE {shop}.orders RENAME TO {shop}.orders2")  # the view moves with it
    assert _get_tables(server, f"{shop}_fresh") == {"orders2": "VIEW", "events": "VIEW"}
    rows = run(hive_cursor, f"SELECT id, v FROM {shop}_fresh.orders2 ORDER BY id")
    assert [tuple(r) for r in rows] == [(1, 1.0), (2, 2.0)]

    run(hive_cursor, f"DROP TABLE {shop}.orders2")
    run(hive_cursor, f"CALL sys.disable_tiering('{shop}.events')")
    assert _get_tables(server, f"{shop}_fresh") == {}
    assert run(hive_cursor, f"SHOW VIEWS IN {shop}_fresh") == []


def view_text(spark, view: str) -> str:
    return spark.sql(f"SHOW CREATE TABLE {view}").collect()[0][0]


def paths(table: str) -> tuple:
    stream = parse_table_path(table)
    return stream, parse_table_path(f"{stream.database}_lake.{stream.table}"), f"{DB}_fresh.{stream.table}"


def commit_batches(spark, table: str, pk: bool, batches: list[list[tuple]], commits: list, logged: list) -> None:
    """Each batch one commit: (key, value, change type) rows, as in the differential test."""
    for s in batches:
        batch = [(k, v, i, ct) for i, (k, v, ct) in enumerate(s)]
        if pk:
            spark.sql(f"INSERT INTO {table} (id, v, seq, _change_type) VALUES "
                      + ", ".join(f"({k}, {v}, {i}, {literal(ct)})" for k, v, i, ct in batch))
            commits.append([Change((k,), (k, v, i), ct, i) for k, v, i, ct in batch])
        else:
            spark.sql(f"INSERT INTO {table} VALUES " + ", ".join(f"({k}, {v}, {i})" for k, v, i, _ in batch))
            logged.extend((k, v, i) for k, v, i, _ in batch)


def stream_rows_read(spark, query: str, stream) -> tuple[int, int]:
    """Rows the scans of ``stream`` (the table itself or its incremental read
    ``tierlake_inc.<db>.<table>.after_<id>``) output while ``query`` ran, and
    how many such scans there were (a primary-key view reads its winners
    twice): the SQL metrics of its executed plan, query stages included."""
    frame = spark.sql(query)
    frame.collect()
    seq = spark.sparkContext._jvm.scala.collection.JavaConverters.seqAsJavaList
    plan = frame._jdf.queryExecution().executedPlan()
    total, scans, pending = 0, 0, [plan]
    while pending:
        node = pending.pop()
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            pending.append(node.executedPlan())
            continue
        if kind.endswith("QueryStageExec"):
            pending.append(node.plan())
        if kind == "BatchScanExec":
            name = node.table().name().replace("`", "")
            if name.endswith(f"{stream.database}.{stream.table}") or f"{stream}.after_" in name:
                total += int(node.metrics().apply("numOutputRows").value())
                scans += 1
        pending.extend(seq(node.children()))
        pending.extend(seq(node.subqueries()))
    return total, scans


def merged_files(spark, stream) -> list[str]:
    """The files FreshMerge.java read for ``stream``'s fresh view, the last time it merged in the driver."""
    merge = spark.sparkContext._jvm.io.tierlake.internal.FreshMerge
    return list(merge.lastRead(f"{stream.database}.{stream.table}"))


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_stream_part_reads_only_the_files_after_the_position(hive_cursor, spark, tmp_path, pk):
    """A long history tiered, a few pending changes: the fresh view's stream
    part neither opens a tiered stream file nor reads a tiered row."""
    name = f"after{next(_counter)}_{'pk' if pk else 'log'}"
    table = create(hive_cursor, name, pk)
    stream, lake, fresh = paths(table)
    commits: list[list[Change]] = []
    logged: list[tuple] = []
    history = [[(k % 4 + 1, float(c), "+U" if pk else None) for k in range(5)] for c in range(6)]
    commit_batches(spark, table, pk, history, commits, logged)
    force_round(spark, table)
    tiered = [unquote(urlparse(r[0]).path) for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()]
    commit_batches(spark, table, pk, [[(2, 9.0, "-D" if pk else None), (7, 7.0, None)]], commits, logged)
    expected = sorted(replay(commits, sequence_by=True).state.values()) if pk else sorted(logged)
    position = lake_position(iceberg_table(spark, lake.quoted))[0]
    start = fresh_view.incremental_start(iceberg_table(spark, stream.quoted), position)
    assert start is not None and f"after_{start}" in view_text(spark, fresh)
    assert rows_of(spark, fresh) == expected

    # Merged in the driver: no stream scan, and only the pending files opened.
    pending = {unquote(urlparse(r[0]).path) for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    pending -= set(tiered)
    assert stream_rows_read(spark, f"SELECT count(*) FROM {fresh}", stream) == (0, 0)
    opened = {unquote(urlparse(f).path) for f in merged_files(spark, stream)}
    assert opened == pending and len(pending) >= 1
    # Merged by Spark: each scan of the stream part reads the 2 pending rows; a full scan reads the
    # 30 of the history too.
    with local_merge_rows(spark, 0):
        rows, scans = stream_rows_read(spark, f"SELECT count(*) FROM {fresh}", stream)
    assert scans >= 1 and rows == 2 * scans
    full_view = f"{DB}_fresh.{name}_full"
    spark.sql(fresh_view.render(TableHandle(spark, stream, lake), parse_table_path(full_view), incremental=False))
    assert rows_of(spark, full_view) == expected
    rows, scans = stream_rows_read(spark, f"SELECT count(*) FROM {full_view}", stream)
    assert scans >= 1 and rows == 32 * scans

    # Every tiered stream file moved away: the view still answers, the full scan cannot.
    aside = tmp_path / "aside"
    aside.mkdir()
    try:
        for i, f in enumerate(tiered):
            shutil.move(f, aside / f"{i}.parquet")
        assert rows_of(spark, fresh) == expected
        with pytest.raises(Exception, match="(?i)not (be )?found|does not exist|FileNotFound"):
            rows_of(spark, full_view)
    finally:
        for i, f in enumerate(tiered):
            if (aside / f"{i}.parquet").exists():
                shutil.move(aside / f"{i}.parquet", f)
        fresh_view.drop_view(spark, parse_table_path(full_view))
    force_round(spark, table)
    assert rows_of(spark, fresh) == rows_of(spark, lake.quoted) == expected


def test_view_falls_back_to_the_full_scan_when_its_start_cannot_be_read(hive_cursor, spark):
    """The snapshot after the view's start expired (by hand: tierlake's expiry keeps it): the
    incremental read falls back to a full scan that its plan names (issue 40), and re-pinning
    makes the view a full scan itself, same rows."""
    table = create(hive_cursor, f"expired{next(_counter)}", pk=False)
    stream, lake, fresh = paths(table)
    logged: list[tuple] = []
    commit_batches(spark, table, False, [[(1, 1.0, None)]], [], logged)
    force_round(spark, table)
    commit_batches(spark, table, False, [[(2, 2.0, None)], [(3, 3.0, None)]], [], logged)
    assert "tierlake_inc" in view_text(spark, fresh)
    stream_table = iceberg_table(spark, stream.quoted)
    child = int(stream_table.currentSnapshot().parentId())
    stream_table.expireSnapshots().expireSnapshotId(child).cleanExpiredFiles(False).commit()
    assert rows_of(spark, fresh) == sorted(logged)
    plan = "\n".join(r[0] for r in spark.sql(f"EXPLAIN SELECT * FROM {fresh}").collect())
    assert "full scan: snapshots after" in plan, plan
    fresh_view.refresh(TableHandle(spark, stream, lake))
    assert "tierlake_inc" not in view_text(spark, fresh)
    assert rows_of(spark, fresh) == sorted(logged)


def view_left_behind(cursor, spark, monkeypatch, prefix: str) -> tuple:
    """A log table whose view was pinned by a round, then not re-pinned by the
    next (its re-pin pending or failed), with a commit after it."""
    table = create(cursor, f"{prefix}{next(_counter)}", pk=False)
    stream, lake, fresh = paths(table)
    logged: list[tuple] = []
    commit_batches(spark, table, False, [[(1, 1.0, None)]], [], logged)
    force_round(spark, table)
    pinned = view_text(spark, fresh)
    commit_batches(spark, table, False, [[(2, 2.0, None)]], [], logged)
    with monkeypatch.context() as m:
        m.setattr(fresh_view, "after_lake_commit", lambda table: None)
        force_round(spark, table)
    commit_batches(spark, table, False, [[(3, 3.0, None)]], [], logged)
    return table, stream, lake, fresh, pinned, logged


def failing_refresh(*args, **kwargs):
    raise RuntimeError("metastore down")


def test_stream_expiry_repins_a_view_left_behind(hive_cursor, spark, monkeypatch):
    """A round whose refresh failed left the view reading after an older
    snapshot; stream expiry re-pins it before expiring that snapshot, and
    keeps every snapshot when it cannot."""
    table, stream, lake, fresh, pinned, logged = view_left_behind(hive_cursor, spark, monkeypatch, "repin")
    assert view_text(spark, fresh) == pinned  # left behind, still exact
    assert rows_of(spark, fresh) == sorted(logged)
    position = lake_position(iceberg_table(spark, lake.quoted))[0]

    def expire():
        action = table_maintenance.Action("stream_expire_snapshots", table, started_ms=0, duration_ms=0)
        table_maintenance.expire_stream(TableHandle(spark, stream, lake), position, 0, 1, action)
        return action

    with monkeypatch.context() as m:
        m.setattr(fresh_view, "refresh", failing_refresh)
        action = expire()
    assert action.snapshots_expired == 0 and action.detail.startswith("kept all"), action
    assert view_text(spark, fresh) == pinned and rows_of(spark, fresh) == sorted(logged)

    action = expire()
    assert action.snapshots_expired >= 1, action
    start = fresh_view.incremental_start(iceberg_table(spark, stream.quoted), position)
    assert f"after_{start}" in view_text(spark, fresh)
    assert rows_of(spark, fresh) == sorted(logged)


def test_log_retention_repins_a_view_left_behind(hive_cursor, spark, monkeypatch):
    """The view re-pins behind the round (or a refresh failed), so it may read
    the stream from before the lake's position: log retention re-pins it
    before removing the changelog up to that position, and removes nothing
    when it cannot."""
    from tierlake.server.kv import log_retention

    table, stream, lake, fresh, pinned, logged = view_left_behind(hive_cursor, spark, monkeypatch, "ttl")
    position = lake_position(iceberg_table(spark, lake.quoted))[0]
    run(hive_cursor, f"ALTER TABLE {table} SET TBLPROPERTIES ('table.log.ttl'='0 s')")
    assert view_text(spark, fresh) == pinned and rows_of(spark, fresh) == sorted(logged)

    with monkeypatch.context() as m:
        m.setattr(fresh_view, "refresh", failing_refresh)
        kept = log_retention.apply(spark, stream)
    assert kept.removed_files == 0 and kept.log_start_position == 0, kept
    assert view_text(spark, fresh) == pinned and rows_of(spark, fresh) == sorted(logged)

    truncated = log_retention.apply(spark, stream)
    assert truncated.log_start_position == position and truncated.removed_files >= 2, truncated
    assert view_text(spark, fresh) != pinned
    assert rows_of(spark, fresh) == sorted(logged)
    assert spark.sql(f"SELECT id FROM {table}").collect() == [(3,)]  # only the pending commit is left


def test_readers_query_the_view_not_the_incremental_catalog(spark):
    """The gateway authorises a query of a fresh view by the view's name (a
    reader's); naming the incremental read ``tierlake_inc.…`` is admin-only."""
    from tierlake.procedures import load_builtins
    from tierlake.server.gateway.auth import planauth
    from tierlake.server.gateway.auth.authz import Authorizer, SparkSessions
    from tierlake.server.sqlapi import roles as R

    authorizer = Authorizer(None, load_builtins()).attach(SparkSessions(spark))
    jsession = authorizer.sessions.session(None, None)

    def role(statement: str):
        plan = planauth.parse_plan(jsession, statement)
        return planauth.requirement(plan, None, authorizer.sessions.functions(jsession, set())).role

    assert role("SELECT count(*) FROM shop_fresh.orders WHERE id = 1") == R.READER
    assert role("SELECT * FROM tierlake_inc.shop.orders.after_1") == R.ADMIN
