"""SIGKILL the server at each step of a round, restart, finish: every row
reaches the lake exactly once and the coordinator agrees with the lake."""

from __future__ import annotations

import json
import signal
import time

import pytest
from pyhive import hive

from tests.conftest import free_port, start_server_process

pytestmark = pytest.mark.integration

CONF = [
    "tierlake.master=local[2]", "spark.sql.shuffle.partitions=2",
    "tierlake.tiering.heartbeat-timeout=4 s", "tierlake.coordinator.interval=1 s",
    "tierlake.tiering.poll-interval=0.3 s", "tierlake.tiering.retry-backoff=1 s",
]


def start(home, port, fault=None, workers=1):
    return start_server_process(home, port, CONF, workers=workers, fault=fault)


def cursor(port):
    return hive.connect("127.0.0.1", port, username="crash").cursor()


def lake_ids(cur):
    cur.execute("SELECT id FROM crash_lake.t")
    return sorted(r[0] for r in cur.fetchall())


def insert(cur, ids):
    cur.execute("INSERT INTO crash.t VALUES " + ", ".join(f"({i})" for i in ids))


def test_sigkill_at_every_step_then_exactly_once(tmp_path):
    home, port = tmp_path / "home", free_port()
    inserted: list[int] = []

    # 1. Killed after planning the first round with data.
    proc = start(home, port, fault="after-plan")
    cur = cursor(port)
    cur.execute("CREATE DATABASE crash")
    cur.execute("CREATE TABLE crash.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                "'table.datalake.freshness'='1 s')")
    insert(cur, range(0, 5))
    inserted += range(0, 5)
    assert proc.wait(timeout=180) == -signal.SIGKILL

    # 2. Killed while the round writes into the lake (its branch).
    for fault, batch in (("during-write:100", range(5, 10)), ("after-lake-commit", range(10, 15))):
        # The batch goes in while no round can run (no worker), so the fault cannot kill the server
        # before the INSERT is acknowledged (a round of the rows still pending from the last crash
        # starts as soon as a worker runs); acknowledged rows survive the kill -9 that follows.
        proc = start(home, port, workers=0)
        cur = cursor(port)
        ids = lake_ids(cur)
        assert len(ids) == len(set(ids)), f"duplicates after a crash: {ids}"
        insert(cur, batch)
        inserted += batch
        proc.kill()
        proc.wait(timeout=60)
        proc = start(home, port, fault=fault)
        assert proc.wait(timeout=180) == -signal.SIGKILL, fault

    # 3. A clean start finishes the work; the lake was ahead of the coordinator.
    proc = start(home, port)
    try:
        cur = cursor(port)
        insert(cur, range(15, 18))
        inserted += range(15, 18)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            ids = lake_ids(cur)
            if len(ids) >= len(inserted):
                break
            time.sleep(1)
        assert lake_ids(cur) == sorted(inserted)  # every row exactly once
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            cur.execute("SELECT tiered_position, status FROM sys.tiering_tables WHERE table_name = 't'")
            position, status = cur.fetchall()[0]
            cur.execute("SELECT summary FROM crash_lake.t.snapshots ORDER BY committed_at DESC LIMIT 1")
            summary = cur.fetchall()[0][0]
            summary = json.loads(summary) if isinstance(summary, str) else summary
            if position == int(summary["tiering.source-position"]) and status != "Tiering":
                break
            time.sleep(1)
        assert position == int(summary["tiering.source-position"])
        cur.execute("SELECT outcome FROM sys.tiering_rounds ORDER BY ended_at")
        outcomes = [r[0] for r in cur.fetchall()]
        # The killed runs' rounds were released by the restarted job (the same job id) at once.
        assert "abandoned" in outcomes and "finished" in outcomes
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
