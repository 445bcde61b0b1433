"""32 concurrent JDBC clients on the status views while 4 tables are tiered
by in-process workers: no statement may fail (throughput and latency are
the bench's: bench/gateway_load.py, recorded in bench/RESULTS.md)."""

from __future__ import annotations

import time
import uuid

import pytest
from pyhive import hive

from bench.gateway_load import Feeder, create_tiered_tables, run_clients
from tests.conftest import running_workers

pytestmark = [pytest.mark.load, pytest.mark.integration]

CLIENTS = 32
STATEMENTS = 3


@pytest.fixture
def tiering_workers(server):
    yield from running_workers(server, 2)


def rounds_and_statuses(cursor, database):
    cursor.execute("SELECT table_name, outcome, error FROM sys.tiering_rounds WHERE database_name = %(db)s",
                   {"db": database})
    rounds = cursor.fetchall()
    cursor.execute("SELECT table_name, status, last_error FROM sys.lake_tiering_status WHERE database_name = %(db)s",
                   {"db": database})
    return rounds, cursor.fetchall()


def test_32_clients_on_status_views_while_4_tables_tier(server, tiering_workers):
    port = server.gateway.port
    admin = hive.connect("127.0.0.1", port, username="load-admin").cursor()
    database = "load_" + uuid.uuid4().hex[:8]
    tables = create_tiered_tables(admin, database, 4)
    feeder = Feeder(server.spark, tables, rows=50)
    feeder.start()
    try:
        result = run_clients(lambda n: hive.connect("127.0.0.1", port, username=f"client{n}"), CLIENTS, STATEMENTS)
        during = rounds_and_statuses(admin, database)
    finally:
        feeder.stop()
    assert result.failures == []
    assert result.statements == CLIENTS * STATEMENTS
    # Tiering went on during the load ...
    assert during[0] or any(s[1] == "Tiering" for s in during[1]), (during, result.summary())
    # ... and every table gets tiered (how soon depends on the machine: bounded wait, no timing assertion).
    expected = {t.split(".")[1] for t in tables}
    deadline = time.monotonic() + 300
    while True:
        rounds, statuses = rounds_and_statuses(admin, database)
        finished = {r[0] for r in rounds if r[1].endswith("finished")}
        if finished == expected or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert finished == expected, (rounds, statuses)
    for table in tables:
        admin.execute(f"CALL sys.disable_tiering('{table}')")
    admin.execute(f"DROP DATABASE {database} CASCADE")
    admin.execute(f"DROP DATABASE IF EXISTS {database}_lake CASCADE")
