"""Stream schema changes through the gateway: every chunk is read onto the
current columns, renames follow the lake column by field id, dropped columns
stay in the lake and get NULL (docs/tiering.md, "Schema changes")."""

from __future__ import annotations

import pytest
from pyhive import exc

from tests.server.tiering.conftest import run, wait_status, wait_tiered
from tierlake.server.runtime.session import iceberg_table

pytestmark = pytest.mark.integration


def status(cursor, db: str, table: str):
    return run(cursor, "SELECT status, last_error FROM sys.lake_tiering_status "
                       "WHERE database_name = %(db)s AND table_name = %(t)s", {"db": db, "t": table})[0]


def retry(cursor, table: str) -> None:
    try:
        run(cursor, f"CALL sys.retry_tiering('{table}')")
    except exc.OperationalError:
        pass  # already retried by the back-off


def lake_columns(cursor, lake: str) -> list[str]:
    cursor.execute(f"SELECT * FROM {lake} LIMIT 0")
    return [d[0].split(".")[-1] for d in cursor.description]


def lake_commits(spark, lake: str) -> int:
    """Tiering commits on the lake table's main (one per chunk). Managed
    compaction carries the tiering summary (the position survives expiry) and
    may run after the round: its commits are marked ``tierlake.maintenance``."""
    table, count = iceberg_table(spark, lake), 0
    snapshot = table.currentSnapshot()
    while snapshot is not None:
        summary = dict(snapshot.summary())
        count += "tiering.source-position" in summary and "tierlake.maintenance" not in summary
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None
    return count


def test_enable_tiering_on_a_primary_key_table_tiers_its_data_in_the_first_round(server, workers, hive_cursor, db):
    # enable_tiering adds _change_type without a stream commit: the first
    # round reads snapshots whose schema has no such column.
    run(hive_cursor, f"CREATE TABLE {db}.accounts (id BIGINT, balance DOUBLE) USING iceberg "
                     "PARTITIONED BY (bucket(2, id)) TBLPROPERTIES ('primary-key'='id', 'bucket.num'='2', "
                     "'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {db}.accounts VALUES (1, 10.0), (2, 20.0)")
    run(hive_cursor, f"INSERT INTO {db}.accounts VALUES (1, 15.0), (3, 30.0)")
    run(hive_cursor, f"CALL sys.enable_tiering('{db}.accounts')")
    wait_tiered(server, f"{db}.accounts")
    lake = dict(run(hive_cursor, f"SELECT id, balance FROM {db}_lake.accounts"))
    assert lake == {1: 15.0, 2: 20.0, 3: 30.0}
    assert status(hive_cursor, db, "accounts")[1] is None
    # Later rounds, with _change_type written, keep working.
    run(hive_cursor, f"INSERT INTO {db}.accounts VALUES (2, 0.0, '-D'), (4, 40.0, '+I')")
    wait_tiered(server, f"{db}.accounts")
    assert dict(run(hive_cursor, f"SELECT id, balance FROM {db}_lake.accounts")) == {1: 15.0, 3: 30.0, 4: 40.0}


def test_a_history_of_several_chunks_with_columns_added_and_renamed_midway(server, workers, hive_cursor, db, spark):
    run(hive_cursor, f"CREATE TABLE {db}.events (id BIGINT, msg STRING) USING iceberg TBLPROPERTIES "
                     "('table.datalake.tiering.chunk-rows'='2', 'table.datalake.freshness'='1 s')")
    expected = {}
    for i in range(0, 6, 2):
        run(hive_cursor, f"INSERT INTO {db}.events VALUES ({i}, 'm{i}'), ({i + 1}, 'm{i + 1}')")
        expected.update({i: (f"m{i}", None), i + 1: (f"m{i + 1}", None)})
    run(hive_cursor, f"ALTER TABLE {db}.events ADD COLUMN note STRING")
    # Files written before the rename are read under the new name.
    run(hive_cursor, f"ALTER TABLE {db}.events RENAME COLUMN msg TO text")
    for i in range(6, 10, 2):
        run(hive_cursor, f"INSERT INTO {db}.events VALUES ({i}, 't{i}', 'n{i}'), ({i + 1}, 't{i + 1}', NULL)")
        expected.update({i: (f"t{i}", f"n{i}"), i + 1: (f"t{i + 1}", None)})
    run(hive_cursor, f"CALL sys.enable_tiering('{db}.events')")
    wait_tiered(server, f"{db}.events")
    rows = run(hive_cursor, f"SELECT id, text, note FROM {db}_lake.events")
    assert {r[0]: (r[1], r[2]) for r in rows} == expected and len(rows) == 10
    assert lake_commits(spark, f"{db}_lake.events") == 5  # five chunks of two rows
    assert status(hive_cursor, db, "events")[1] is None


def test_renamed_and_dropped_stream_columns(server, workers, hive_cursor, db):
    run(hive_cursor, f"CREATE TABLE {db}.users (id BIGINT, name STRING, city STRING) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2', "
                     "'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {db}.users VALUES (1, 'a', 'x', NULL), (2, 'b', 'y', NULL)")
    wait_tiered(server, f"{db}.users")

    # A rename renames the lake column; old and new values are in the one column.
    run(hive_cursor, f"ALTER TABLE {db}.users RENAME COLUMN city TO town")
    run(hive_cursor, f"INSERT INTO {db}.users (id, name, town, _change_type) VALUES "
                     "(3, 'c', 'z', NULL), (1, 'a2', 'w', '+U')")
    wait_tiered(server, f"{db}.users")
    assert lake_columns(hive_cursor, f"{db}_lake.users") == ["id", "name", "town"]
    rows = run(hive_cursor, f"SELECT id, name, town FROM {db}_lake.users")
    assert {r[0]: r[1:] for r in rows} == {1: ("a2", "w"), 2: ("b", "y"), 3: ("c", "z")}

    # A dropped column stays in the lake: rows tiered after the drop (upserts too) have NULL there.
    run(hive_cursor, f"ALTER TABLE {db}.users DROP COLUMN name")
    run(hive_cursor, f"INSERT INTO {db}.users (id, town, _change_type) VALUES (4, 'v', '+I'), (2, 'q', NULL)")
    wait_tiered(server, f"{db}.users")
    assert lake_columns(hive_cursor, f"{db}_lake.users") == ["id", "name", "town"]
    rows = run(hive_cursor, f"SELECT id, name, town FROM {db}_lake.users")
    assert {r[0]: r[1:] for r in rows} == {1: ("a2", "w"), 2: (None, "q"), 3: ("c", "z"), 4: (None, "v")}

    # Added again under that name, it continues the lake column.
    run(hive_cursor, f"ALTER TABLE {db}.users ADD COLUMN name STRING")
    run(hive_cursor, f"INSERT INTO {db}.users (id, town, name, _change_type) VALUES (5, 'u', 'e', NULL)")
    wait_tiered(server, f"{db}.users")
    assert sorted(lake_columns(hive_cursor, f"{db}_lake.users")) == ["id", "name", "town"]
    rows = run(hive_cursor, f"SELECT id, name, town FROM {db}_lake.users")
    assert {r[0]: r[1:] for r in rows} == {1: ("a2", "w"), 2: (None, "q"), 3: ("c", "z"), 4: (None, "v"),
                                           5: ("e", "u")}
    assert status(hive_cursor, db, "users")[1] is None


def test_a_rename_onto_a_name_the_lake_still_uses_fails_with_the_fix(server, workers, hive_cursor, db):
    run(hive_cursor, f"CREATE TABLE {db}.logs (id BIGINT, a STRING, b STRING) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {db}.logs VALUES (1, 'a1', 'b1')")
    wait_tiered(server, f"{db}.logs")
    run(hive_cursor, f"ALTER TABLE {db}.logs DROP COLUMN a")  # the lake keeps column a
    run(hive_cursor, f"ALTER TABLE {db}.logs RENAME COLUMN b TO a")
    run(hive_cursor, f"INSERT INTO {db}.logs VALUES (2, 'b2')")
    state = wait_status(server, f"{db}.logs", "Failed")
    fix = f"ALTER TABLE {db}_lake.logs RENAME COLUMN a TO a_old"
    assert "renamed to a" in state.last_error and fix in state.last_error
    assert fix in status(hive_cursor, db, "logs")[1]
    assert run(hive_cursor, f"SELECT count(*) FROM {db}_lake.logs")[0][0] == 1  # nothing tiered
    # The fix the message gives works.
    run(hive_cursor, fix)
    retry(hive_cursor, f"{db}.logs")
    wait_tiered(server, f"{db}.logs")
    rows = run(hive_cursor, f"SELECT id, a_old, a FROM {db}_lake.logs")
    assert sorted(rows) == [(1, "a1", "b1"), (2, None, "b2")]


def test_a_renamed_key_column_fails_with_the_fix(server, workers, hive_cursor, db):
    run(hive_cursor, f"CREATE TABLE {db}.items (id BIGINT, v STRING) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2', "
                     "'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"INSERT INTO {db}.items (id, v, _change_type) VALUES (1, 'a', NULL)")
    wait_tiered(server, f"{db}.items")
    run(hive_cursor, f"ALTER TABLE {db}.items RENAME COLUMN id TO item_id")
    run(hive_cursor, f"INSERT INTO {db}.items (item_id, v, _change_type) VALUES (1, 'b', NULL)")
    state = wait_status(server, f"{db}.items", "Failed")
    fix = f"ALTER TABLE {db}.items RENAME COLUMN item_id TO id"
    assert "primary key column id" in state.last_error and fix in state.last_error
    assert fix in status(hive_cursor, db, "items")[1]
    run(hive_cursor, fix)
    retry(hive_cursor, f"{db}.items")
    wait_tiered(server, f"{db}.items")
    assert run(hive_cursor, f"SELECT id, v FROM {db}_lake.items") == [(1, "b")]
