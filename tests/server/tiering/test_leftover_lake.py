"""``DROP TABLE t`` then a tiered ``CREATE TABLE t``, through the real gateway:
the old table's lake rows are still there, and the CREATE refuses, saying what
it found and the ways out, instead of making a table that goes Failed at its
first round (StreamReplacedError). Once the lake table is renamed away, the
same CREATE works."""

from __future__ import annotations

import pytest
from pyhive import exc

from tests.conftest import running_workers, wait_for

pytestmark = pytest.mark.integration

DB = "leftover"
CREATE = (f"CREATE TABLE {DB}.events (id BIGINT, what STRING) "
          "TBLPROPERTIES ('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")


@pytest.fixture(scope="module")
def workers(server):
    yield from running_workers(server, 1)


def test_create_over_a_leftover_lake_table_refuses_and_says_what_it_found(server, workers, hive_cursor):
    c = hive_cursor
    c.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    c.execute(f"DROP TABLE IF EXISTS {DB}.events")
    c.execute(f"DROP TABLE IF EXISTS {DB}_lake.events")
    c.execute(f"DROP TABLE IF EXISTS {DB}_lake.events_old")
    c.execute(CREATE)
    c.fetchall()
    c.execute(f"INSERT INTO {DB}.events VALUES (1, 'a'), (2, 'b')")

    def tiered():
        c.execute(f"SELECT count(*) FROM {DB}_lake.events")
        return c.fetchone()[0] == 2

    wait_for(tiered, 180, "the first round")
    c.execute(f"DROP TABLE {DB}.events")
    with pytest.raises(exc.OperationalError) as refused:
        c.execute(CREATE)
    status = refused.value.args[0].status
    assert status.sqlState == "42P07", status
    message = status.errorMessage
    assert f"its lake table {DB}_lake.events already exists" in message, message
    assert "stream table UUID" in message and "Nothing was created" in message, message
    assert f"ALTER TABLE {DB}_lake.events RENAME TO" in message and f"DROP TABLE {DB}_lake.events" in message
    c.execute(f"SHOW TABLES IN {DB}")
    assert "events" not in {r[1] for r in c.fetchall()}  # nothing was made
    c.execute(f"SELECT count(*) FROM {DB}_lake.events")
    assert c.fetchone()[0] == 2  # the old rows are untouched

    c.execute(f"ALTER TABLE {DB}_lake.events RENAME TO {DB}_lake.events_old")
    c.execute(CREATE)
    c.fetchall()
    c.execute(f"INSERT INTO {DB}.events VALUES (3, 'c')")

    def new_round():
        c.execute(f"SELECT id FROM {DB}_lake.events")
        return [r[0] for r in c.fetchall()] == [3]

    wait_for(new_round, 180, "the new table's first round")
    c.execute(f"SELECT status FROM sys.lake_tiering_status WHERE database_name = '{DB}' AND table_name = 'events'")
    assert c.fetchone()[0] != "Failed"
