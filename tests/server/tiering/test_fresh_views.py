"""Fresh views (docs/tiering.md, "Fresh views"): ``<db>_fresh.<table>`` reads
the lake plus the changes committed after the tiered position.

- generated append/change batches with rounds at random moments: at every
  step the fresh view equals the reference model of everything committed
  (log: every row; primary-key: tests/server/changelog/reference_model.py);
  after a forced round it equals the lake table row for row;
- rounds committing in a loop while queries run in a loop: a monotone counter
  column is never seen twice and never with a gap;
- the views are listed by GetTables (what Hive JDBC's getTables sends) and
  ``SHOW VIEWS``, move with a renamed table and go away with the table.

Rounds run in the test's thread (no worker), so "a round at a random moment"
is a step hypothesis chooses.
"""

from __future__ import annotations

import itertools
import threading

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.server.changelog.reference_model import Change, replay
from tests.server.tiering.conftest import run
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.changelog import planner
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.tiering.round import run_round

pytestmark = pytest.mark.integration

DB = "fresh_views"
_counter = itertools.count()


def force_round(spark, table: str, chunk_rows: int = 1_000_000) -> None:
    """One round of ``table`` now, in this thread (what a worker does, without the coordinator)."""
    stream = parse_table_path(table)
    lake = parse_table_path(f"{stream.database}_lake.{stream.table}")
    props = {str(k): str(v) for k, v in dict(iceberg_table(spark, stream.quoted).properties()).items()}
    plan = planner.plan_round(spark, stream, lake, TieredSpec.from_properties(props))
    run_round(spark, plan, table_id=0, epoch=0, job_id="test", check_epoch=lambda: None, max_duration_s=600,
              chunk_rows=chunk_rows)


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
    return sorted(tuple(r) for r in spark.sql(f"SELECT id, v, seq FROM {table}").collect())


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
            batch = [(k, v, i, ct) for i, (k, v, ct) in enumerate(s)]
            if pk:
                spark.sql(f"INSERT INTO {table} (id, v, seq, _change_type) VALUES "
                          + ", ".join(f"({k}, {v}, {i}, {literal(ct)})" for k, v, i, ct in batch))
                commits.append([Change((k,), (k, v, i), ct, i) for k, v, i, ct in batch])
            else:
                spark.sql(f"INSERT INTO {table} VALUES " + ", ".join(f"({k}, {v}, {i})" for k, v, i, _ in batch))
                logged.extend((k, v, i) for k, v, i, _ in batch)
        expected = sorted(replay(commits, sequence_by=True).state.values()) if pk else sorted(logged)
        assert rows_of(spark, fresh) == expected, f"after {s!r}"
    force_round(spark, table)
    assert rows_of(spark, fresh) == rows_of(spark, lake) == expected


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
