"""The changelog rule of primary-key tables (docs/tiering.md, "What lands in
the lake"), through the gateway with a real worker: generated changelogs
against the pure-Python reference model (tests/server/changelog/
reference_model.py), and the inputs that are refused (changes whose order
cannot be decided, unknown change types, NULL keys) with the way out the
error gives.

Every table tiers one commit per lake commit (``chunk-rows`` 1), so a failing
commit leaves the lake exactly at the commit before it; one round may take
them all (``max-round-duration``). Waits are long and examples are not
shrunk: the machine running this may be loaded.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyhive import exc

from tests.server.changelog.reference_model import Change, replay
from tests.server.tiering.conftest import run, stream_position, wait_status, wait_tiered
from tierlake.server.changelog.validation import FIX_ORDER
from tierlake.server.runtime.session import iceberg_table

pytestmark = pytest.mark.integration

_counter = itertools.count()
DB = "changelog_rule"
WAIT = 300.0


def create(cursor, name: str, sequence_by: bool, columns: str = "id BIGINT, v DOUBLE, seq BIGINT",
           key: str = "id", seq: str = "seq", chunk_rows: int = 1) -> str:
    run(cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    run(cursor, f"CREATE TABLE {DB}.{name} ({columns}) TBLPROPERTIES ('table.datalake.enabled'='true', "
                f"'primary-key'='{key}', 'bucket.num'='2', 'table.datalake.freshness'='1 s', "
                f"'table.datalake.tiering.chunk-rows'='{chunk_rows}', "
                "'table.datalake.tiering.max-round-duration'='10 min'"
                + (f", 'sequence-by'='{seq}'" if sequence_by else "") + ")")
    return f"{DB}.{name}"


def literal(value) -> str:
    return "NULL" if value is None else repr(value)


def insert(cursor, table: str, rows) -> None:
    run(cursor, f"INSERT INTO {table} (id, v, seq, _change_type) VALUES "
        + ", ".join("(" + ", ".join(literal(x) for x in row) + ")" for row in rows))


class SparkWriter:
    """A writer that bypasses the gateway (Spark in the server's process, as
    another Spark application would): the gateway refuses bad change types and
    NULL keys at INSERT (docs/ingest.md), so only such a writer gets them into
    a stream table, and the round's check is the second line."""

    description = None

    def __init__(self, spark):
        self.spark = spark

    def execute(self, statement, params=None):
        assert params is None
        self.spark.sql(statement)


def last_error(cursor, table: str) -> str | None:
    db, name = table.split(".")
    return run(cursor, "SELECT last_error FROM sys.lake_tiering_status WHERE database_name = %(db)s "
                       "AND table_name = %(t)s", {"db": db, "t": name})[0][0]


def lake_rows(cursor, table: str) -> dict:
    return {r[0]: (r[1], r[2]) for r in run(cursor, f"SELECT id, v, seq FROM {DB}_lake.{table.split('.')[1]}")}


def disable(cursor, table: str) -> None:
    run(cursor, f"CALL sys.disable_tiering('{table}')")  # the worker no longer retries it


change = st.tuples(
    st.sampled_from([1, 2, 3]),                               # key
    st.sampled_from([1.0, 2.0, 3.0]),                         # value
    st.sampled_from([1, 2, 3, 4, 5, 6, None]),                # sequence value, sometimes NULL
    st.sampled_from(["+I", "+U", "-U", "-D", "-D", None]),    # change type (NULL = upsert)
)
# Several changes per key per commit; deletes and re-inserts across commits.
changelogs = st.lists(st.lists(change, min_size=1, max_size=5), min_size=1, max_size=3)


@settings(max_examples=6, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(commits=changelogs, sequence_by=st.booleans())
def test_generated_changelogs_match_the_reference_model(server, workers, hive_cursor, spark, commits, sequence_by):
    check_against_the_model(server, hive_cursor, spark, commits, sequence_by, chunk_rows=1)


@settings(max_examples=5, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(commits=changelogs, sequence_by=st.booleans())
def test_a_first_round_of_several_commits_matches_the_reference_model(server, workers, hive_cursor, spark, commits,
                                                                     sequence_by):
    """Every commit in one chunk, the first into the empty lake: its winners are appended
    (tiering_pk_load.sql.j2), not merged; the rule and the outcome are the same."""
    check_against_the_model(server, hive_cursor, spark, commits, sequence_by, chunk_rows=1_000_000)


def check_against_the_model(server, hive_cursor, spark, commits, sequence_by: bool, chunk_rows: int) -> None:
    table = create(hive_cursor, f"gen{next(_counter)}", sequence_by, chunk_rows=chunk_rows)
    all_at_once = chunk_rows > 1
    if all_at_once:
        disable(hive_cursor, table)  # every commit is in the stream before the first round
    positions = []
    for rows in commits:
        # Past the gateway (it refuses changes it cannot order at INSERT, docs/ingest.md): the round's rule.
        insert(SparkWriter(spark), table, rows)
        positions.append(stream_position(spark, table))
    if all_at_once:
        run(hive_cursor, f"CALL sys.enable_tiering('{table}')")
    model = replay([[Change((k,), (k, v, s), c, s if sequence_by else None) for k, v, s, c in rows]
                    for rows in commits], sequence_by)
    if model.violation is None:
        wait_tiered(server, table, timeout=WAIT)
        assert last_error(hive_cursor, table) is None
    else:
        wait_status(server, table, "Failed", timeout=WAIT)
        error = last_error(hive_cursor, table)
        assert f"primary-key table {table} cannot be tiered" in error
        assert f"in the commit at log position {positions[model.failed_commit]}" in error
        for (key,) in model.violation.ambiguous:
            assert f"key (id={key})" in error
        assert FIX_ORDER in error and f"sys.retry_tiering('{table}')" in error
    assert lake_rows(hive_cursor, table) == {k: (row[1], row[2]) for (k,), row in model.state.items()}
    disable(hive_cursor, table)


def test_the_issue_example_fails_naming_key_7_and_the_way_out_works(server, workers, hive_cursor, spark):
    """``(7, …, '+I')`` and ``(7, NULL, NULL, NULL, '-D')`` in one commit, sequence-by ts: the -D has no
    sequence value, so the order is unknown; rolled back, written in two commits, the next commit
    cherry-picked back and retried, the lake is right."""
    name = f"orders{next(_counter)}"
    table = create(hive_cursor, name, True, "order_id BIGINT, amount DOUBLE, status STRING, ts TIMESTAMP",
                   key="order_id", seq="ts")
    run(hive_cursor, f"INSERT INTO {table} (order_id, amount, status, ts, _change_type) VALUES "
                     "(1, 1.0, 'new', now(), '+I')")
    good = iceberg_table(spark, table).currentSnapshot().snapshotId()
    # The gateway refuses this INSERT at once (AmbiguousChangesError); another application's write gets it in.
    run(SparkWriter(spark), f"INSERT INTO {table} (order_id, amount, status, ts, _change_type) VALUES "
                            "(7, 9.5, 'paid', now(), '+I'), (7, NULL, NULL, NULL, '-D')")
    bad = iceberg_table(spark, table).currentSnapshot()
    run(hive_cursor, f"INSERT INTO {table} (order_id, amount, status, ts, _change_type) VALUES "
                     "(8, 8.0, 'new', now(), '+I')")
    later = iceberg_table(spark, table).currentSnapshot().snapshotId()
    wait_status(server, table, "Failed", timeout=WAIT)
    error = last_error(hive_cursor, table)
    assert f"primary-key table {table} cannot be tiered" in error
    assert "key (order_id=7) (2 changes in the commit at log position " f"{bad.sequenceNumber()})" in error
    assert "sequence-by column ts is NULL or equal" in error and FIX_ORDER in error
    assert f"rollback_to_snapshot('{table}', {good})" in error
    assert run(hive_cursor, f"SELECT order_id FROM {DB}_lake.{name}") == [(1,)]  # nothing of that commit
    # The way out the error gives: take the commit out, write it again ordered, put the later one back.
    run(hive_cursor, f"CALL spark_catalog.system.rollback_to_snapshot('{table}', {good})")
    run(hive_cursor, f"INSERT INTO {table} (order_id, amount, status, ts, _change_type) VALUES "
                     "(7, 9.5, 'paid', now(), '+I')")
    run(hive_cursor, f"INSERT INTO {table} (order_id, amount, status, ts, _change_type) VALUES "
                     "(7, NULL, NULL, NULL, '-D')")
    run(hive_cursor, f"CALL spark_catalog.system.cherrypick_snapshot('{table}', {later})")
    try:
        run(hive_cursor, f"CALL sys.retry_tiering('{table}')")
    except exc.OperationalError:
        pass  # the back-off already re-queued it
    wait_tiered(server, table, timeout=WAIT)
    assert sorted(run(hive_cursor, f"SELECT order_id, status FROM {DB}_lake.{name}")) == [(1, "new"), (8, "new")]
    disable(hive_cursor, table)


def test_unknown_change_types_are_refused_with_values_and_counts(server, workers, hive_cursor, spark):
    table = create(hive_cursor, f"types{next(_counter)}", False)
    insert(hive_cursor, table, [(1, 1.0, 1, "+I")])
    insert(SparkWriter(spark), table, [(2, 2.0, 1, "+X"), (3, 3.0, 1, "+X"), (4, 4.0, 1, "-d"), (5, 5.0, 1, "D"),
                                       (6, 6.0, 1, "-D "), (1, 9.0, 2, "+U")])
    position = stream_position(spark, table)
    wait_status(server, table, "Failed", timeout=WAIT)
    error = last_error(hive_cursor, table)
    for value, rows in (("+X", 2), ("-d", 1), ("D", 1), ("-D ", 1)):
        assert f"'{value}' ({rows} row{'s' if rows > 1 else ''}, first at log position {position})" in error
    assert "accepted are '+I', '-U', '+U', '-D' and NULL (upsert)" in error
    assert lake_rows(hive_cursor, table) == {1: (1.0, 1)}  # the +U of that commit is not tiered either
    # KV snapshots write through the same path and refuse it too.
    with pytest.raises(exc.OperationalError, match="unknown _change_type values '\\+X'"):
        run(hive_cursor, f"CALL sys.kv_snapshot('{table}')")
    disable(hive_cursor, table)


def test_a_null_key_is_refused_naming_the_rows(server, workers, hive_cursor, spark):
    table = create(hive_cursor, f"nullkey{next(_counter)}", True)
    # Key columns are created NOT NULL; a NULL key can still slip in where a
    # user made the column optional again (Iceberg allows that change).
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN id DROP NOT NULL")
    insert(hive_cursor, table, [(1, 1.0, 1, "+I")])
    insert(SparkWriter(spark), table, [(None, 2.0, 1, "+I"), (2, 2.0, 1, "+I")])
    position = stream_position(spark, table)
    wait_status(server, table, "Failed", timeout=WAIT)
    error = last_error(hive_cursor, table)
    assert f"1 row with a NULL key column (id), first at log position {position}" in error
    assert '{"id":null,"v":2.0,"seq":1,"_change_type":"+I"}' in error
    assert lake_rows(hive_cursor, table) == {1: (1.0, 1)}
    disable(hive_cursor, table)
