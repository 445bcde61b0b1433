"""Scale-out as docs/design.md, 'Processes', draws it: one server, several `tierlake
tiering-service` processes, a shared PostgreSQL metastore, a Spark
standalone cluster. Everything runs as users run it (subprocesses, loopback)."""

from __future__ import annotations

import os
import random
import signal
import time
import uuid

import pytest
from pyhive import hive

from tests.conftest import (
    free_port,
    service_ready,
    start_server_process,
    start_service_process,
    stop_process,
    wait_for,
)

pytestmark = pytest.mark.integration

TABLES = 8
COMMON = [
    "spark.sql.shuffle.partitions=2", "spark.ui.enabled=false",
    "tierlake.tiering.heartbeat-timeout=15 s", "tierlake.coordinator.interval=1 s",
    "tierlake.tiering.poll-interval=0.3 s", "tierlake.tiering.retry-backoff=1 s",
]


def metastore_conf(postgres) -> list[str]:
    url = postgres.create_database("ms_" + uuid.uuid4().hex[:8])
    return [f"tierlake.metastore.url={url}", f"tierlake.metastore.user={postgres.user}",
            f"tierlake.metastore.password={postgres.password}"]


def cursor(port):
    return hive.connect("127.0.0.1", port, username="scale").cursor()


def create_table(cur, table: str, columns: str = "id BIGINT") -> None:
    cur.execute(f"CREATE TABLE {table} ({columns}) TBLPROPERTIES ('table.datalake.enabled'='true', "
                "'table.datalake.freshness'='1 s')")



def lake_ids(cur, table: str) -> list[int]:
    cur.execute(f"SELECT id FROM {table}")
    return sorted(r[0] for r in cur.fetchall())


# Where in its second round the victim is killed: before the write, while
# writing, between the lake commit and the coordinator's (the worst moment).
KILL_POINTS = ("after-plan", "during-write:200", "before-commit", "after-lake-commit")


def test_two_tiering_services_on_postgres_tier_exactly_once_through_a_sigkill_and_restart(postgres, tmp_path):
    seed = int(os.environ.get("TIERLAKE_TEST_SEED", time.time_ns() % 10_000))
    kill_point = random.Random(seed).choice(KILL_POINTS)
    point, _, delay = kill_point.partition(":")
    fault = f"{point}@2" + (f":{delay}" if delay else "")
    context = f"(killed at {fault}; rerun with TIERLAKE_TEST_SEED={seed})"
    conf = COMMON + ["tierlake.master=local[1]"] + metastore_conf(postgres)
    port = free_port()
    server = start_server_process(tmp_path / "server", port, conf, workers=0)
    url = f"jdbc:hive2://127.0.0.1:{port}/default"
    survivor = victim = None
    try:
        survivor = start_service_process(tmp_path / "svc-a", url, conf)
        # The victim tiers one table at a time, so the fault's second hit is its second round
        # (with several at once, both hits could be first rounds of two tables); the
        # survivor holds several tables at once (tierlake.tiering.tables-per-job, default 4).
        victim = start_service_process(tmp_path / "svc-b", url, conf + ["tierlake.tiering.tables-per-job=1"],
                                       fault=fault)
        cur = cursor(port)
        cur.execute("CREATE DATABASE scale")
        for n in range(TABLES):  # while the services start
            create_table(cur, f"scale.t{n}")
        (survivor_job,), (victim_job,) = service_ready(survivor), service_ready(victim)

        inserted: dict[int, list[int]] = {n: [] for n in range(TABLES)}
        next_id = 0

        def wave() -> None:
            nonlocal next_id
            for n in range(TABLES):
                ids = list(range(next_id, next_id + 3))
                next_id += 3
                cur.execute(f"INSERT INTO scale.t{n} VALUES " + ", ".join(f"({i})" for i in ids))
                inserted[n] += ids

        # Waves until the victim has reached its fault (bounded: ~6 waves).
        deadline = time.monotonic() + 240
        while victim.poll() is None and time.monotonic() < deadline:
            wave()
            for _ in range(10):
                if victim.poll() is not None:
                    break
                time.sleep(1)
        assert victim.wait(timeout=5) == -signal.SIGKILL, context
        wave()

        def all_tiered():
            return all(len(lake_ids(cur, f"scale_lake.t{n}")) >= len(inserted[n]) for n in range(TABLES))

        wait_for(all_tiered, 180, "every row in the lake")
        for n in range(TABLES):
            assert lake_ids(cur, f"scale_lake.t{n}") == inserted[n], f"t{n}: not exactly once {context}"

        cur.execute("SELECT table_name, job_id, outcome, ended_at, error FROM sys.tiering_rounds ORDER BY ended_at")
        rounds = cur.fetchall()
        finished_by = {job for _, job, outcome, _, _ in rounds if outcome == "finished"}
        assert finished_by == {survivor_job, victim_job}, "tables were not spread over both jobs"
        timed_out = [
            (t, at, err) for t, job, outcome, at, err in rounds if outcome == "timed_out" and job == victim_job
        ]
        assert timed_out, f"no round of the killed job timed out {context}: {rounds}"
        table, at, error = timed_out[0]
        assert f"tiering job {victim_job} sent no heartbeat" in error
        assert any(
            t == table and job == survivor_job and outcome == "finished" and later > at
            for t, job, outcome, later, _ in rounds
        ), f"{table} did not move to the live job: {rounds}"

        def settled():
            cur.execute(
                "SELECT table_name, status, last_error FROM sys.lake_tiering_status WHERE database_name = 'scale'"
            )
            statuses = cur.fetchall()
            return len(statuses) == TABLES and all(s[1] != "Failed" for s in statuses)

        wait_for(settled, 60, "no table left Failed")

        # The killed service comes back on its home: the same job, tiering again.
        restarted_at = time.time()
        victim = start_service_process(tmp_path / "svc-b", url, conf)
        assert service_ready(victim) == [victim_job]

        def victim_tiered_again():
            wave()
            cur.execute(
                "SELECT count(*) FROM sys.tiering_rounds WHERE job_id = %(job)s AND outcome = 'finished' "
                "AND unix_timestamp(ended_at) > %(at)s",
                {"job": victim_job, "at": int(restarted_at)},
            )
            return cur.fetchall()[0][0] > 0

        wait_for(victim_tiered_again, 180, "a round by the restarted job")
        wait_for(all_tiered, 180, "every row in the lake after the restart")
        for n in range(TABLES):
            assert lake_ids(cur, f"scale_lake.t{n}") == inserted[n], f"t{n}: not exactly once after restart {context}"
    finally:
        for proc in (victim, survivor):
            if proc is not None:
                stop_process(proc)
        assert stop_process(server) == 0


def test_server_and_tiering_service_on_a_standalone_cluster(postgres, tmp_path):
    from tests.standalone import LocalStandalone

    cluster = LocalStandalone(cores=2, memory="2g").start()
    # One core and a small executor per app, so both fit on the 2-core worker.
    conf = (
        COMMON
        + metastore_conf(postgres)
        + [
            f"tierlake.master={cluster.url}",
            "spark.driver.host=127.0.0.1",
            "spark.driver.bindAddress=127.0.0.1",
            "spark.cores.max=1",
            "spark.executor.cores=1",
            "spark.executor.memory=512m",
        ]
    )
    port = free_port()
    server = service = None
    try:
        server = start_server_process(tmp_path / "server", port, conf, workers=0)
        url = f"jdbc:hive2://127.0.0.1:{port}/default"
        service = start_service_process(tmp_path / "svc", url, conf)
        service_ready(service)
        cur = cursor(port)
        cur.execute("CALL sys.server_info()")
        assert dict(cur.fetchall())["master"] == cluster.url
        cur.execute("CREATE DATABASE sa")
        create_table(cur, "sa.events", "id BIGINT, msg STRING")
        cur.execute("INSERT INTO sa.events VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        wait_for(lambda: lake_ids(cur, "sa_lake.events") == [1, 2, 3], 120, "the first rows in the lake")
        cur.execute("INSERT INTO sa.events VALUES (4, 'd'), (5, 'e')")
        wait_for(lambda: len(lake_ids(cur, "sa_lake.events")) >= 5, 120, "the second rows in the lake")
        cur.execute("SELECT id, msg FROM sa_lake.events ORDER BY id")
        assert cur.fetchall() == [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]
        # Both apps got an executor on the worker: the rows went through it.
        apps = cluster.apps()
        assert len(apps) == 2 and all(a["cores"] == 1 for a in apps), apps
    finally:
        for proc in (service, server):
            if proc is not None:
                stop_process(proc)
        cluster.stop()
