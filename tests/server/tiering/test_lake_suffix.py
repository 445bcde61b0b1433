"""``tierlake.lake.database-suffix`` is honoured everywhere: a server started
with ``_warehouse`` creates, registers and tiers into ``<db>_warehouse.<t>``,
and never touches ``<db>_lake`` (the session server has the default suffix, so
this one is its own process)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import free_port, start_server_process, stop_process

pytestmark = pytest.mark.integration

SUFFIX = "_warehouse"


def _wait_for(cursor, query: str, expected, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while True:
        cursor.execute(query)
        rows = cursor.fetchall()
        if rows == expected or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def test_custom_lake_suffix_is_used_for_created_and_enabled_tables(tmp_path):
    from pyhive import hive

    port = free_port()
    proc = start_server_process(tmp_path / "home", port, workers=1, conf=[
        f"tierlake.lake.database-suffix={SUFFIX}", "tierlake.master=local[2]", "spark.sql.shuffle.partitions=2",
        "tierlake.coordinator.interval=1 s", "tierlake.tiering.poll-interval=0.2 s"])
    try:
        conn = hive.connect("127.0.0.1", port, username="tester")
        cur = conn.cursor()
        cur.execute("CREATE DATABASE sfx")
        cur.execute("CREATE TABLE sfx.events (id BIGINT, v STRING) TBLPROPERTIES "
                    "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
        cur.execute("INSERT INTO sfx.events VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        # An existing table enabled afterwards takes the same suffix.
        cur.execute("CREATE TABLE sfx.plain (id BIGINT) USING iceberg TBLPROPERTIES ('table.datalake.freshness'='1 s')")
        cur.execute("INSERT INTO sfx.plain VALUES (10), (20)")
        cur.execute("CALL sys.enable_tiering('sfx.plain')")
        assert cur.fetchall()[0][2] == f"sfx{SUFFIX}.plain"

        assert _wait_for(cur, f"SELECT count(*) FROM sfx{SUFFIX}.events", [(3,)]) == [(3,)]
        assert _wait_for(cur, f"SELECT count(*) FROM sfx{SUFFIX}.plain", [(2,)]) == [(2,)]
        cur.execute("SELECT table_name, lake_database, lake_table FROM sys.tiering_tables "
                    "WHERE database_name = 'sfx' ORDER BY table_name")
        assert cur.fetchall() == [("events", f"sfx{SUFFIX}", "events"), ("plain", f"sfx{SUFFIX}", "plain")]
        cur.execute("SHOW DATABASES LIKE 'sfx_lake'")
        assert cur.fetchall() == []
        conn.close()
    finally:
        stop_process(proc)
