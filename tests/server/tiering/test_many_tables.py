"""One tiering job holding several tables at once (``tierlake.tiering.tables-per-job``):
rounds of different tables overlap, run in the FAIR pool ``tiering``, and
each table still ends exactly once in its lake table."""

from __future__ import annotations

import threading

from tests.server.tiering.conftest import run, wait_tiered
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.tiering.worker import Worker


def test_one_job_tiers_several_tables_at_once_in_the_tiering_pool(server, spark, hive_cursor, db):
    tables = [f"{db}.m{i}" for i in range(6)]
    for i, table in enumerate(tables):
        run(hive_cursor, f"CREATE TABLE {table} (id BIGINT, v STRING) TBLPROPERTIES "
                         "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
        run(hive_cursor, f"INSERT INTO {table} VALUES ({i}, 'a'), ({i + 100}, 'b')")
        run(hive_cursor, f"INSERT INTO {table} VALUES ({i + 200}, 'c')")
    assert spark.sparkContext.getConf().get("spark.scheduler.mode") == "FAIR"

    worker = Worker(spark, LocalClient(server), "job-many", server.config)
    assert worker.tables_per_job == 4  # the default
    pools, lock, started, overlapped = set(), threading.Lock(), [0], threading.Event()

    def hook(name):
        if name == "after-plan":
            with lock:
                pools.add(spark.sparkContext.getLocalProperty("spark.scheduler.pool"))
                started[0] += 1
                if started[0] >= 2:
                    overlapped.set()
            # A log round copies its files in milliseconds: the first one waits (a while) for a second
            # round to start, which only a job holding two tables at once can do.
            overlapped.wait(60)

    worker.hook = hook
    worker.start()
    try:
        for table in tables:
            wait_tiered(server, table)
    finally:
        worker.stop()
        worker.join(timeout=120)
    assert not worker.is_alive()
    assert worker.most_at_once >= 2, "the job never held two tables at once"
    assert worker.most_at_once <= 4
    assert pools == {"tiering"}
    for i, table in enumerate(tables):
        lake = table.replace(f"{db}.", f"{db}_lake.")
        assert sorted(run(hive_cursor, f"SELECT id, v FROM {lake}")) == [(i, "a"), (i + 100, "b"), (i + 200, "c")]
