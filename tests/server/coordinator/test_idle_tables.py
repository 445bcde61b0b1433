"""Idle tables cost (almost) nothing (issue 54 item 5): a table whose stream
has not changed since its last round gets no round, however often its
freshness interval passes; a write, an ALTER TABLE or a maintenance request
still gets one at once. Through the real gateway, with a tiering worker."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conftest import running_workers, wait_for
from tests.server.tiering.conftest import coordinator_state, wait_tiered
from tierlake.server.observability import metrics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(server):
    yield from running_workers(server, 1)


def rounds_of(database: str, table: str) -> float:
    """Rounds that finished for the table, as /metrics counts them."""
    return metrics.ROUNDS.labels(database, table, "tiered")._value.get()


def test_an_idle_table_gets_no_rounds_until_its_stream_changes(server, hive_cursor, worker, spark):
    db = "idle_" + uuid.uuid4().hex[:6]
    table = f"{db}.events"
    hive_cursor.execute(f"CREATE DATABASE {db}")
    hive_cursor.execute(f"CREATE TABLE {table} (id BIGINT, what STRING) TBLPROPERTIES "
                        "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    hive_cursor.execute(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    wait_tiered(server, table)
    # After the round that tiered the write, at most one more: the one that sees the stream
    # as that round (or its maintenance) left it, and finds it unchanged.
    time.sleep(4)
    settled = rounds_of(db, "events")
    skipped = server.coordinator.streams.skipped
    time.sleep(8)  # eight freshness intervals, eight scheduler ticks
    assert rounds_of(db, "events") == settled, "an idle table was tiered again"
    assert server.coordinator.streams.skipped > skipped
    assert coordinator_state(server, table).status.value == "Scheduled"

    # A write is tiered as before, within its freshness interval.
    hive_cursor.execute(f"INSERT INTO {table} VALUES (3, 'c')")
    wait_tiered(server, table, timeout=60)
    assert rounds_of(db, "events") > settled
    assert spark.sql(f"SELECT count(*) FROM {db}_lake.events").collect()[0][0] == 3

    # A schema change alone moves the stream's metadata: the next round carries it to the lake.
    hive_cursor.execute(f"ALTER TABLE {table} ADD COLUMNS (note STRING)")
    wait_for(lambda: "note" in spark.table(f"{db}_lake.events").columns, 60, "the new column in the lake")

    # Requested maintenance runs inside a round: an idle table gets one for it.
    hive_cursor.execute(f"CALL sys.run_maintenance('{table}')")
    assert hive_cursor.fetchall()
