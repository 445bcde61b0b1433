"""DROP TABLE and RENAME of a tiered stream table through the gateway: the
coordinator's registration follows in the same step (server/gateway/fresh_ddl.py)."""

from __future__ import annotations

import uuid

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
