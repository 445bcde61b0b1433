"""``/metrics`` of the real server while it tiers two tables (and fails a third): the lag, rows and round
metrics move as a user would expect, a Failed table shows in ``tierlake_table_status{status="Failed"}`` and
its failure counter, and scraping costs no Spark job."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import running_workers, wait_for
from tests.server.observability.conftest import scrape, spark_jobs, value
from tests.server.tiering.conftest import run, wait_status, wait_tiered

pytestmark = pytest.mark.integration


def test_metrics_follow_two_tables_tiering_and_one_failing(server, hive_cursor):
    db = "obs_" + uuid.uuid4().hex[:6]
    cur = hive_cursor
    assert server.http is not None and server.http.url.startswith("http://127.0.0.1:")  # development mode: on
    run(cur, f"CREATE DATABASE {db}")
    for name in ("a", "b"):
        run(cur, f"CREATE TABLE {db}.{name} (id BIGINT, v STRING) TBLPROPERTIES ("
                 "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(cur, f"CREATE TABLE {db}.bad (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
             "'primary-key'='id', 'bucket.num'='1', 'table.datalake.freshness'='1 s')")
    before = scrape(server)
    relayed, local = (("tierlake_gateway_statements_total", (("kind", kind), ("outcome", "ok")))
                      for kind in ("relayed", "local"))
    run(cur, f"INSERT INTO {db}.a VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    run(cur, f"INSERT INTO {db}.b VALUES (1, 'a')")
    run(cur, f"INSERT INTO {db}.b VALUES (2, 'b')")
    run(cur, f"SELECT count(*) FROM {db}.a")

    workers = running_workers(server, 1)
    next(workers)
    try:
        wait_tiered(server, f"{db}.a")
        wait_tiered(server, f"{db}.b")

        def counted():
            # A worker records its round after reporting it: the coordinator may say tiered a moment earlier.
            samples = scrape(server)
            rows = (value(samples, "tierlake_round_rows_total", db, "a"),
                    value(samples, "tierlake_round_rows_total", db, "b"))
            return samples if rows == (3, 2) else None

        samples = wait_for(counted, 30, "the rounds' rows to be counted", every=0.2)
        # Rows: what was inserted, per table; every round that tiered is in the histogram.
        assert value(samples, "tierlake_round_rows_total", db, "a") == 3
        assert value(samples, "tierlake_round_rows_total", db, "b") == 2
        assert value(samples, "tierlake_round_bytes_total", db, "a") > 0
        assert value(samples, "tierlake_round_duration_seconds_count", db, "a") >= 1
        assert value(samples, "tierlake_round_duration_seconds_sum", db, "a") > 0
        assert value(samples, "tierlake_rounds_total", db, "b", outcome="tiered") >= 1
        assert value(samples, "tierlake_ingest_acknowledged_total", db, "b") == 2
        assert value(samples, "tierlake_table_freshness_seconds", db, "a") == 1
        assert value(samples, "tierlake_table_status", db, "a", status="Failed") == 0
        assert samples[("tierlake_heartbeat_duration_seconds_count", ())] > 0
        assert samples[("tierlake_gateway_sessions", ())] >= 1  # this test's own session
        assert samples[relayed] >= before.get(relayed, 0) + 1  # the SELECT, run by Spark
        assert samples[local] >= before.get(local, 0) + 3  # the INSERTs, committed by the gateway
        server.backlog_probe.probe()  # what its timer does every few seconds, now
        samples = scrape(server)
        assert value(samples, "tierlake_table_lag_seconds", db, "a") == 0  # caught up
        assert value(samples, "tierlake_table_pending_rows", db, "a") == 0
        assert value(samples, "tierlake_lake_files", db, "a") >= 1
        assert value(samples, "tierlake_lake_bytes", db, "a") > 0

        # b falls behind: its next round is an hour away, its stream takes two more commits.
        run(cur, f"ALTER TABLE {db}.b SET TBLPROPERTIES ('table.datalake.freshness'='1 h')")
        wait_status(server, f"{db}.b", "Scheduled")
        run(cur, f"INSERT INTO {db}.b VALUES (3, 'c'), (4, 'd')")
        run(cur, f"INSERT INTO {db}.b VALUES (5, 'e')")
        server.backlog_probe.probe()

        def lagging():
            samples = scrape(server)
            return samples if value(samples, "tierlake_table_lag_seconds", db, "b") >= 2 else None

        samples = wait_for(lagging, 30, "b's lag to grow", every=0.5)
        assert value(samples, "tierlake_table_pending_rows", db, "b") == 3
        assert value(samples, "tierlake_table_pending_bytes", db, "b") > 0
        assert value(samples, "tierlake_table_freshness_seconds", db, "b") == 3600
        assert value(samples, "tierlake_round_rows_total", db, "b") == 2  # nothing tiered meanwhile
        assert value(samples, "tierlake_table_status", db, "b", status="Scheduled") == 1

        # A change type no writer through the gateway could send makes every round of bad fail.
        server.spark.sql(f"INSERT INTO {db}.bad (id, v, _change_type) VALUES (1, 'x', '+X')")
        wait_status(server, f"{db}.bad", "Failed", timeout=120)

        def failed():
            # Failed until its retry back-off (2 s here) ends; then Pending and Tiering again, and Failed.
            samples = scrape(server)
            return samples if value(samples, "tierlake_table_status", db, "bad", status="Failed") == 1 else None

        samples = wait_for(failed, 60, "bad to show as Failed", every=0.1)
        assert value(samples, "tierlake_table_status", db, "bad", status="Tiered") == 0
        assert value(samples, "tierlake_round_failures_total", db, "bad") >= 1
        assert value(samples, "tierlake_table_consecutive_failures", db, "bad") >= 1
        assert value(samples, "tierlake_round_rows_total", db, "bad") == 0
    finally:
        next(workers, None)  # stops and joins the worker
    run(cur, f"CALL sys.disable_tiering('{db}.bad')")
    assert value(scrape(server), "tierlake_table_status", db, "bad", status="Failed") == 0  # forgotten


def test_a_hundred_scrapes_run_no_spark_job(server):
    spark = server.spark
    before = spark_jobs(spark)
    spark.range(10).count()  # the counter sees a job when there is one
    assert spark_jobs(spark) > before
    # The server's own threads (housekeeping, re-pins of fresh views) may run a job at any time: a window
    # that saw one is measured again. Scrapes that ran jobs would put 100 or more in every window.
    windows = []
    for _ in range(3):
        settled(spark)
        before = spark_jobs(spark)
        for _ in range(100):
            scrape(server)
        windows.append(spark_jobs(spark) - before)
        if not windows[-1]:
            break
    assert 0 in windows, f"Spark jobs during each window of 100 scrapes: {windows}"


def settled(spark, quiet_s: float = 3.0) -> None:
    """Until no Spark job has started for ``quiet_s`` seconds."""
    import time

    deadline = time.monotonic() + 120
    last, since = spark_jobs(spark), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "Spark never went quiet"
        time.sleep(0.2)
        now = spark_jobs(spark)
        if now != last:
            last, since = now, time.monotonic()
