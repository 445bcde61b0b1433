"""DROP TABLE and RENAME of a tiered stream table through the gateway: the
coordinator's registration follows in the same step (server/gateway/routing/fresh_ddl.py)."""

from __future__ import annotations

import uuid

from tests.conftest import wait_for
from tests.server.tiering.conftest import make_due, run, wait_tiered


def statuses(cursor, db: str) -> list[tuple]:
    return run(cursor, "SELECT table_name, status FROM sys.lake_tiering_status WHERE database_name = %(db)s "
                       "ORDER BY table_name", {"db": db})


def test_a_renamed_table_keeps_being_tiered_and_a_dropped_one_is_unregistered(server, workers, spark, hive_cursor):
    shop = "ddl_" + uuid.uuid4().hex[:8]
    run(hive_cursor, f"CREATE DATABASE {shop}")
    run(hive_cursor, f"CREATE TABLE {shop}.orders (id BIGINT, v DOUBLE) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2', "
                     "'table.datalake.freshness'='1 h')")
    run(hive_cursor, f"INSERT INTO {shop}.orders (id, v, _change_type) VALUES (1, 1.0, '+I')")
    make_due(server, f"{shop}.orders")
    wait_tiered(server, f"{shop}.orders")

    run(hive_cursor, f"ALTER TABLE {shop}.orders RENAME TO {shop}.orders2")
    assert [r[0] for r in statuses(hive_cursor, shop)] == ["orders2"]
    run(hive_cursor, f"INSERT INTO {shop}.orders2 (id, v, _change_type) VALUES (2, 2.0, '+I')")
    make_due(server, f"{shop}.orders2")
    state = wait_tiered(server, f"{shop}.orders2")
    assert state.last_error is None
    # The lake table keeps its name; it holds both writes, from before and after the rename.
    assert sorted(map(tuple, run(hive_cursor, f"SELECT id, v FROM {shop}_lake.orders"))) == [(1, 1.0), (2, 2.0)]

    run(hive_cursor, f"DROP TABLE {shop}.orders2")
    # No Failed table retrying a stream that is gone: unregistered with the drop.
    assert statuses(hive_cursor, shop) == []
    assert run(hive_cursor, f"SHOW VIEWS IN {shop}_fresh") == []


def test_a_column_change_on_an_idle_table_reaches_the_lake_and_the_view(server, workers, spark, hive_cursor):
    db = "ddl_" + uuid.uuid4().hex[:8]
    run(hive_cursor, f"CREATE DATABASE {db}")
    run(hive_cursor, f"CREATE TABLE {db}.t (id BIGINT, label STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'primary-key'='id', 'bucket.num'='2', 'table.datalake.freshness'='2 s')")
    run(hive_cursor, f"INSERT INTO {db}.t (id, label, _change_type) VALUES (1, 'a', '+I'), (2, 'b', '+I')")
    wait_tiered(server, f"{db}.t")
    # No row arrives after these: the next rounds have nothing to tier.
    run(hive_cursor, f"ALTER TABLE {db}.t RENAME COLUMN label TO title")
    run(hive_cursor, f"ALTER TABLE {db}.t ADD COLUMN note STRING")

    def lake_columns():
        return [f.name for f in spark.table(f"{db}_lake.t").schema.fields]

    wait_for(lambda: lake_columns() == ["id", "title", "note"], 60, "the lake to take the rename and the new column")

    def view_rows():
        try:
            return run(hive_cursor, f"SELECT id, title, note FROM {db}_fresh.t ORDER BY id")
        except Exception:  # noqa: BLE001 - the old view names the old column until it is re-pinned
            return None

    rows = wait_for(view_rows, 60, "the fresh view to show the new columns")
    assert [tuple(r) for r in rows] == [(1, "a", None), (2, "b", None)]
    # Pending rows under the new names read right too.
    run(hive_cursor, f"INSERT INTO {db}.t (id, title, _change_type, note) VALUES (3, 'c', '+I', 'x')")
    rows = run(hive_cursor, f"SELECT id, title, note FROM {db}_fresh.t ORDER BY id")
    assert [tuple(r) for r in rows] == [(1, "a", None), (2, "b", None), (3, "c", "x")]


    # A dropped column stays in the lake (NULL from then on) and the view follows the drop at once,
    # with no row arriving after it: the old view named the stream column that is gone.
    wait_tiered(server, f"{db}.t")
    run(hive_cursor, f"ALTER TABLE {db}.t DROP COLUMN note")

    def view_after_drop():
        try:
            return [tuple(r) for r in run(hive_cursor, f"SELECT * FROM {db}_fresh.t ORDER BY id")]
        except Exception:  # noqa: BLE001 - the old view names the dropped column until it is re-pinned
            return None

    wait_for(lambda: view_after_drop() == [(1, "a", None), (2, "b", None), (3, "c", "x")], 60,
             "the fresh view to follow the dropped column")
    assert lake_columns() == ["id", "title", "note"]
    run(hive_cursor, f"INSERT INTO {db}.t (id, title, _change_type) VALUES (4, 'd', '+I')")
    assert view_after_drop() == [(1, "a", None), (2, "b", None), (3, "c", "x"), (4, "d", None)]
