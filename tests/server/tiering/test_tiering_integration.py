"""Stream tables to lake tables through the real gateway, with a real worker."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from pyhive import exc

from tests.server.tiering.conftest import (
    coordinator_state,
    lake_summary,
    make_due,
    run,
    stream_position,
    wait_status,
    wait_tiered,
)

pytestmark = pytest.mark.integration


def test_log_table_end_to_end_over_jdbc(server, workers, hive_cursor, db, spark, tmp_path):
    created = run(hive_cursor, f"CREATE TABLE {db}.events (id BIGINT, msg STRING, ts TIMESTAMP) TBLPROPERTIES "
                               "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    assert created[0][1:] == (f"{db}.events", f"{db}_lake.events", "Scheduled")
    expected = Counter()
    for batch in range(3):
        values = [(batch * 10 + i, f"m{batch}-{i}") for i in range(4)]
        run(hive_cursor, f"INSERT INTO {db}.events (id, msg, ts) VALUES "
            + ", ".join(f"({i}, '{m}', current_timestamp())" for i, m in values))
        expected.update(values)
    # A DataFrame append and a Structured Streaming write are sources too.
    spark.createDataFrame([(100, "df")], "id BIGINT, msg STRING").selectExpr("id", "msg", "current_timestamp() AS ts") \
        .writeTo(f"{db}.events").append()
    expected.update([(100, "df")])
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text("\n".join(json.dumps({"id": 200 + i, "msg": "stream"}) for i in range(3)))
    query = (spark.readStream.schema("id BIGINT, msg STRING").json(str(source))
             .selectExpr("id", "msg", "current_timestamp() AS ts")
             .writeStream.option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
             .toTable(f"{db}.events"))
    query.awaitTermination(120)
    expected.update([(200 + i, "stream") for i in range(3)])

    wait_tiered(server, f"{db}.events")
    lake = Counter(tuple(r) for r in run(hive_cursor, f"SELECT id, msg FROM {db}_lake.events"))
    assert lake == expected
    row = run(hive_cursor, "SELECT status, last_tiered_time, last_error FROM sys.lake_tiering_status "
                           "WHERE database_name = %(db)s AND table_name = 'events'", {"db": db})[0]
    assert row[0] in ("Scheduled", "Pending", "Tiered", "Tiering") and row[1] is not None and row[2] is None
    rounds = run(hive_cursor, "SELECT outcome, rows, start_position, end_position FROM sys.tiering_rounds "
                              "WHERE database_name = %(db)s ORDER BY ended_at", {"db": db})
    assert rounds and all(r[0] == "finished" for r in rounds)
    assert sum(r[1] for r in rounds) == sum(expected.values())
    assert rounds[-1][3] == stream_position(spark, f"{db}.events")
    # The first round starts at the stream's start (0, not NULL); each next
    # one where the previous one ended.
    assert [r[2] for r in rounds] == [0] + [r[3] for r in rounds[:-1]]
    summary = lake_summary(spark, f"{db}_lake.events")
    state = coordinator_state(server, f"{db}.events")
    assert summary["tiering.table-id"] == str(state.table_id)
    assert summary["tiering.source-position"] == str(state.tiered_position)
    assert summary["commit-user"] == "tierlake" and int(summary["tiering.epoch"]) >= 1


def apply_model(model: dict, changes: list[tuple]) -> None:
    """The expected lake state: changes (key, value, seq, change_type) applied in order."""
    for key, value, seq, change in changes:
        if change == "-U":
            continue
        if change == "-D":
            model.pop(key, None)
        else:
            model[key] = (value, seq)


def test_primary_key_table_with_updates_deletes_and_sequence_by(server, workers, hive_cursor, db, spark):
    run(hive_cursor, f"CREATE TABLE {db}.orders (id BIGINT, amount DOUBLE, seq BIGINT) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2', "
                     "'sequence-by'='seq', 'table.datalake.freshness'='1 s')")
    model: dict = {}
    commits = [
        [(1, 1.0, 1, "+I"), (2, 2.0, 1, None), (3, 3.0, 1, "+I")],
        # several changes to one key in one commit: sequence-by orders them
        [(1, 9.0, 5, "+U"), (1, 1.5, 3, "-U"), (1, 7.0, 4, "+U"), (2, 0.0, 2, "-D")],
        [(3, 30.0, 1, "-U"), (3, 33.0, 2, "+U"), (4, 4.0, 1, None)],
        [(4, 0.0, 9, "-D"), (4, 44.0, 10, "+I"), (5, 5.0, 1, "-D")],
    ]
    for commit in commits:
        run(hive_cursor, f"INSERT INTO {db}.orders (id, amount, seq, _change_type) VALUES "
            + ", ".join(f"({k}, {v}, {s}, {'NULL' if c is None else repr(c)})" for k, v, s, c in commit))
        apply_model(model, sorted(commit, key=lambda r: r[2]))
    wait_tiered(server, f"{db}.orders")
    lake = {r[0]: (r[1], r[2]) for r in run(hive_cursor, f"SELECT id, amount, seq FROM {db}_lake.orders")}
    assert lake == model == {1: (9.0, 5), 3: (33.0, 2), 4: (44.0, 10)}


def test_partitioned_lake_table_and_add_column(server, workers, hive_cursor, db, spark):
    from tierlake.server.runtime.session import iceberg_table

    run(hive_cursor, f"CREATE TABLE {db}.clicks (id BIGINT, ts TIMESTAMP) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.partition'='days(ts)', "
                     "'table.datalake.freshness'='1 s')")
    assert "day" in str(iceberg_table(spark, f"{db}_lake.clicks").spec().toString())
    run(hive_cursor, f"INSERT INTO {db}.clicks VALUES (1, TIMESTAMP'2026-01-01 10:00:00'), "
                     "(2, TIMESTAMP'2026-01-02 10:00:00')")
    wait_tiered(server, f"{db}.clicks")
    run(hive_cursor, f"ALTER TABLE {db}.clicks ADD COLUMN note STRING")
    run(hive_cursor, f"INSERT INTO {db}.clicks VALUES (3, TIMESTAMP'2026-01-03 10:00:00', 'new column')")
    wait_tiered(server, f"{db}.clicks")
    rows = run(hive_cursor, f"SELECT id, note FROM {db}_lake.clicks ORDER BY id")
    assert rows == [(1, None), (2, None), (3, "new column")]
    partitions = run(hive_cursor, f"SELECT count(*) FROM {db}_lake.clicks.partitions")
    assert partitions[0][0] == 3


def test_a_user_delete_on_the_stream_fails_with_the_snapshot_and_the_fix(server, workers, hive_cursor, db, spark):
    from tierlake.server.runtime.session import iceberg_table

    run(hive_cursor, f"CREATE TABLE {db}.log (id BIGINT) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    # Two statements, two data files: the DELETE below drops a whole file (operation 'delete').
    run(hive_cursor, f"INSERT INTO {db}.log VALUES (1)")
    run(hive_cursor, f"INSERT INTO {db}.log VALUES (2)")
    wait_tiered(server, f"{db}.log")
    tiered_snapshot = iceberg_table(spark, f"{db}.log").currentSnapshot().snapshotId()
    run(hive_cursor, f"DELETE FROM {db}.log WHERE id = 1")
    delete_snapshot = iceberg_table(spark, f"{db}.log").currentSnapshot().snapshotId()
    state = wait_status(server, f"{db}.log", "Failed")
    error = state.last_error
    assert "non-append commit" in error and f"snapshot {delete_snapshot}" in error
    assert "operation 'delete'" in error
    assert f"rollback_to_snapshot('{db}.log', {tiered_snapshot})" in error
    assert f"sys.retry_tiering('{db}.log')" in error
    row = run(hive_cursor, "SELECT status, last_error FROM sys.lake_tiering_status "
                           "WHERE database_name = %(db)s AND table_name = 'log'", {"db": db})[0]
    assert row[0] in ("Failed", "Pending", "Tiering") and "non-append commit" in row[1]
    # The fix the message gives works.
    run(hive_cursor, f"CALL spark_catalog.system.rollback_to_snapshot('{db}.log', {tiered_snapshot})")
    run(hive_cursor, f"INSERT INTO {db}.log VALUES (3)")
    try:
        run(hive_cursor, f"CALL sys.retry_tiering('{db}.log')")
    except exc.OperationalError:
        pass  # already retried by the back-off
    wait_tiered(server, f"{db}.log")
    assert sorted(r[0] for r in run(hive_cursor, f"SELECT id FROM {db}_lake.log")) == [1, 2, 3]
    assert coordinator_state(server, f"{db}.log").last_error is None


def test_ddl_errors_are_clear(hive_cursor, db):
    for statement, fragment in [
        (f"CREATE TABLE {db}.x (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='nope')",
         "invalid value 'nope' for table property 'primary-key': 'nope' is not a column of the table"),
        (f"CREATE TABLE {db}.x (id BIGINT) USING parquet TBLPROPERTIES ('table.datalake.enabled'='true')",
         "USING parquet is not possible"),
        (f"CREATE TABLE {db}.x (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', 'bucket.num'='x')",
         "invalid value 'x' for table property 'bucket.num': expected a whole number"),
        (f"CREATE TABLE {db}.x (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true') AS SELECT 1 AS id",
         "Schema may not be specified in a Create Table As Select (CTAS) statement"),  # Spark's parse
        (f"CREATE TABLE {db}.x (id BIGINT, _change_type STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
         "'primary-key'='id')", "column _change_type is added by tierlake"),
        ("CREATE TABLE no_such_db_zz.x (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')",
         "NoSuchNamespaceException: Namespace does not exist: no_such_db_zz"),
    ]:
        with pytest.raises(exc.OperationalError) as info:
            run(hive_cursor, statement)
        assert fragment in info.value.args[0].status.errorMessage, info.value.args[0].status.errorMessage
        assert info.value.args[0].status.sqlState != "XX000", info.value.args[0].status
    run(hive_cursor, f"CREATE TABLE {db}.y (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')")
    with pytest.raises(exc.OperationalError) as info:
        run(hive_cursor, f"CREATE TABLE {db}.y (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')")
    assert "already exists" in info.value.args[0].status.errorMessage
    assert run(hive_cursor, f"CREATE TABLE IF NOT EXISTS {db}.y (id BIGINT) "
                            "TBLPROPERTIES ('table.datalake.enabled'='true')") == []


def test_a_round_that_reaches_its_maximum_duration_commits_what_it_has(server, workers, hive_cursor, db, spark):
    run(hive_cursor, f"CREATE TABLE {db}.big (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'table.datalake.freshness'='1 h', 'table.datalake.tiering.max-round-duration'='0 s', "
                     "'table.datalake.tiering.chunk-rows'='1')")
    # The first, empty round is over: a new table starts Scheduled and due now, so Scheduled alone can
    # be seen before that round (which would then take the first INSERT); its epoch says it ran.
    deadline = time.monotonic() + 120
    while not ((state := coordinator_state(server, f"{db}.big")).status.value == "Scheduled"
               and state.tiering_epoch >= 1):
        assert time.monotonic() < deadline, state
        time.sleep(0.3)
    for batch in range(3):
        run(hive_cursor, f"INSERT INTO {db}.big VALUES ({batch})")
    make_due(server, f"{db}.big")
    wait_tiered(server, f"{db}.big")
    # The history row of a round is appended just after the state commit that ends it.
    deadline = time.monotonic() + 60
    while True:
        rounds = run(hive_cursor, "SELECT outcome, rows FROM sys.tiering_rounds WHERE database_name = %(db)s "
                                  "ORDER BY ended_at", {"db": db})
        if len(rounds) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # Each round stops after one lake commit and goes straight back to Pending.
    assert rounds == [("force_finished", 1), ("force_finished", 1), ("finished", 1)]
    assert sorted(r[0] for r in run(hive_cursor, f"SELECT id FROM {db}_lake.big")) == [0, 1, 2]


def test_primary_key_rows_survive_merged_stream_manifests(server, workers, hive_cursor, db, spark):
    # Merging manifests rewrites not-yet-tiered ADDED entries as EXISTING ones.
    run(hive_cursor, f"CREATE TABLE {db}.m (k BIGINT, v BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'primary-key'='k', 'bucket.num'='1', 'table.datalake.freshness'='1 h', "
                     "'commit.manifest.min-count-to-merge'='2')")
    wait_status(server, f"{db}.m", "Scheduled")
    for k in range(5):
        run(hive_cursor, f"INSERT INTO {db}.m (k, v, _change_type) VALUES ({k}, {k * 10}, '+I')")
    make_due(server, f"{db}.m")
    wait_tiered(server, f"{db}.m")
    assert run(hive_cursor, f"SELECT k, v FROM {db}_lake.m ORDER BY k") == [(k, k * 10) for k in range(5)]


def test_a_changed_freshness_applies_at_once_and_bad_values_are_refused(server, workers, hive_cursor, db):
    run(hive_cursor, f"CREATE TABLE {db}.f (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'table.datalake.freshness'='1 h')")
    wait_status(server, f"{db}.f", "Scheduled")
    run(hive_cursor, f"INSERT INTO {db}.f VALUES (1)")
    with pytest.raises(exc.OperationalError) as info:
        run(hive_cursor, f"ALTER TABLE {db}.f SET TBLPROPERTIES ('table.datalake.freshness'='soon')")
    assert ("invalid value 'soon' for table property 'table.datalake.freshness'"
            in info.value.args[0].status.errorMessage)
    # Without the reschedule this would wait out the rest of the hour.
    run(hive_cursor, f"ALTER TABLE {db}.f SET TBLPROPERTIES ('table.datalake.freshness'='1 s')")
    state = wait_tiered(server, f"{db}.f", timeout=60)
    assert state.properties["table.datalake.freshness"] == "1 s"
    assert run(hive_cursor, f"SELECT id FROM {db}_lake.f") == [(1,)]


def test_an_incompatible_column_change_fails_with_the_fix(server, workers, hive_cursor, db):
    run(hive_cursor, f"CREATE TABLE {db}.c (id INT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {db}.c VALUES (1)")
    wait_tiered(server, f"{db}.c")
    run(hive_cursor, f"ALTER TABLE {db}.c ALTER COLUMN id TYPE BIGINT")
    run(hive_cursor, f"INSERT INTO {db}.c VALUES (2)")
    error = wait_status(server, f"{db}.c", "Failed").last_error
    assert f"column id of stream table {db}.c is bigint but int in lake table {db}_lake.c" in error
    assert f"ALTER TABLE {db}_lake.c ALTER COLUMN id TYPE bigint" in error


def lake_ids(hive_cursor, lake: str) -> list[int]:
    return sorted(r[0] for r in run(hive_cursor, f"SELECT id FROM {lake}"))


def test_a_replaced_lake_table_fails_with_the_cause_and_the_fix_rebuilds_it(server, workers, hive_cursor, db, spark):
    stream, lake = f"{db}.replaced", f"{db}_lake.replaced"
    run(hive_cursor, f"CREATE TABLE {stream} (id BIGINT) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {stream} VALUES (1), (2)")
    wait_tiered(server, stream)
    # An Iceberg user's REPLACE TABLE: properties and old snapshots stay, main starts afresh.
    spark.sql(f"REPLACE TABLE {lake} USING iceberg AS SELECT * FROM {lake} WHERE id = 2")
    run(hive_cursor, f"INSERT INTO {stream} VALUES (3)")
    error = wait_status(server, stream, "Failed").last_error
    assert f"the lake table {lake} was replaced (REPLACE TABLE or CREATE OR REPLACE)" in error
    assert "position 1" in error and f"DROP TABLE {lake}" in error
    assert lake_ids(hive_cursor, lake) == [2]  # nothing was tiered after the old position
    # The fix the message gives: rebuild from the stream's retained history.
    run(hive_cursor, f"DROP TABLE {lake}")
    run(hive_cursor, f"CALL sys.disable_tiering('{stream}')")
    run(hive_cursor, f"CALL sys.enable_tiering('{stream}')")
    make_due(server, stream)
    wait_tiered(server, stream)
    assert lake_ids(hive_cursor, lake) == [1, 2, 3]


def test_a_dropped_and_recreated_lake_table_fails_instead_of_continuing(server, workers, hive_cursor, db, spark):
    stream, lake = f"{db}.recreated", f"{db}_lake.recreated"
    run(hive_cursor, f"CREATE TABLE {stream} (id BIGINT) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {stream} VALUES (1), (2)")
    wait_tiered(server, stream)
    spark.sql(f"ALTER TABLE {lake} RENAME TO {lake}_old")
    spark.sql(f"CREATE TABLE {lake} USING iceberg AS SELECT * FROM {lake}_old WHERE id = 2")
    run(hive_cursor, f"INSERT INTO {stream} VALUES (3)")
    error = wait_status(server, stream, "Failed").last_error
    assert f"the lake table {lake} has no record of a tiering commit" in error and "dropped or replaced" in error
    assert lake_ids(hive_cursor, lake) == [2]


def test_a_lake_rolled_back_is_re_tiered_from_the_stream_nothing_skipped(server, workers, hive_cursor, db, spark):
    from tierlake.server.runtime.session import iceberg_table

    stream, lake = f"{db}.rolled", f"{db}_lake.rolled"
    run(hive_cursor, f"CREATE TABLE {stream} (id BIGINT) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {stream} VALUES (1)")
    wait_tiered(server, stream)
    first = iceberg_table(spark, lake).currentSnapshot().snapshotId()
    run(hive_cursor, f"INSERT INTO {stream} VALUES (2)")
    wait_tiered(server, stream)
    spark.sql(f"CALL spark_catalog.system.rollback_to_snapshot('{lake}', {first})")
    run(hive_cursor, f"INSERT INTO {stream} VALUES (3)")
    make_due(server, stream)
    wait_tiered(server, stream)
    assert lake_ids(hive_cursor, lake) == [1, 2, 3]
