"""``sys.lake_tiering_lag`` through the gateway: a caught-up table, a table
whose stream has commits the lake has not (inside its freshness) and a table
whose rounds fail (its lag keeps growing and turns overdue)."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.server.tiering.conftest import run, wait_status, wait_tiered

pytestmark = pytest.mark.integration

COLUMNS = [("database_name", "STRING"), ("table_name", "STRING"), ("freshness", "STRING"),
           ("freshness_seconds", "BIGINT"), ("lag_seconds", "BIGINT"), ("overdue", "BOOLEAN"),
           ("pending_rows", "BIGINT"), ("pending_bytes", "BIGINT")]


def lag(server, cursor, db: str) -> dict[str, tuple]:
    server.backlog_probe.probe()  # what the periodic probe does, now
    rows = run(cursor, "SELECT * FROM sys.lake_tiering_lag WHERE database_name = %(db)s", {"db": db})
    assert [(d[0], d[1].replace("_TYPE", "")) for d in cursor.description] == COLUMNS
    return {r[1]: r[2:] for r in rows}


def test_lag_of_caught_up_lagging_and_failing_tables(server, workers, hive_cursor):
    db = "lag_" + uuid.uuid4().hex[:6]
    cur = hive_cursor
    run(cur, f"CREATE DATABASE {db}")
    run(cur, f"CREATE TABLE {db}.ok (id BIGINT, v STRING) TBLPROPERTIES ("
             "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(cur, f"CREATE TABLE {db}.slow (id BIGINT, v STRING) TBLPROPERTIES ("
             "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(cur, f"CREATE TABLE {db}.bad (id BIGINT, v STRING) TBLPROPERTIES ("
             "'table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='1', "
             "'table.datalake.freshness'='2 s')")
    run(cur, f"INSERT INTO {db}.ok VALUES (1, 'a'), (2, 'b')")
    run(cur, f"INSERT INTO {db}.slow VALUES (1, 'a')")
    wait_tiered(server, f"{db}.ok")
    wait_tiered(server, f"{db}.slow")
    run(cur, f"ALTER TABLE {db}.slow SET TBLPROPERTIES ('table.datalake.freshness'='1 h')")
    wait_status(server, f"{db}.slow", "Scheduled")  # a round in flight has ended; the next is an hour away
    before_slow = time.monotonic()
    run(cur, f"INSERT INTO {db}.slow VALUES (2, 'b'), (3, 'c')")
    run(cur, f"INSERT INTO {db}.slow VALUES (4, 'd')")
    after_slow = time.monotonic()  # both slow commits are older than this
    # An unknown change type from a writer that bypasses the gateway (which refuses it at INSERT).
    server.spark.sql(f"INSERT INTO {db}.bad (id, v, _change_type) VALUES (1, 'x', '+X')")
    failed = wait_status(server, f"{db}.bad", "Failed", timeout=120)
    assert "+X" in failed.last_error

    time.sleep(max(0.0, after_slow + 3 - time.monotonic()))  # the slow table's oldest change is >= 3 s old
    rows = lag(server, cur, db)
    waited = time.monotonic() - before_slow  # ... and at most this old
    assert rows["ok"] == ("1 s", 1, 0, False, 0, 0)
    freshness, seconds, slow_lag, overdue, pending_rows, pending_bytes = rows["slow"]
    assert (freshness, seconds, overdue, pending_rows) == ("1 h", 3600, False, 3)
    assert 2 <= slow_lag <= waited + 1 and pending_bytes > 0
    assert rows["bad"][:2] == ("2 s", 2) and rows["bad"][4] == 1

    # The failing table is never tiered: its lag grows past its freshness.
    deadline = time.monotonic() + 60
    while not rows["bad"][3]:
        assert time.monotonic() < deadline, rows
        time.sleep(1)
        rows = lag(server, cur, db)
    assert rows["bad"][2] > 2 and rows["bad"][4] == 1 and rows["bad"][5] > 0
    # lake_tiering_status keeps exactly its seven columns.
    run(cur, "SELECT * FROM sys.lake_tiering_status LIMIT 1")
    assert [d[0] for d in cur.description] == ["database_name", "table_name", "status", "tiering_epoch",
                                               "last_tiered_time", "last_error", "last_error_time"]
    run(cur, f"CALL sys.disable_tiering('{db}.bad')")
