"""Scale-out as DESIGN §1 draws it: one server, several `tierlake
tiering-service` processes, a shared PostgreSQL metastore, a Spark
standalone cluster. Everything runs as users run it (subprocesses, loopback)."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from pyhive import hive

from tests.conftest import (free_port, service_ready, start_server_process, start_service_process,
                            stop_process)

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


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def lake_ids(cur, table: str) -> list[int]:
    cur.execute(f"SELECT id FROM {table}")
    return sorted(r[0] for r in cur.fetchall())


def test_two_tiering_services_on_postgres_tier_exactly_once_through_a_sigkill(postgres, tmp_path):
    conf = COMMON + ["tierlake.master=local[1]"] + metastore_conf(postgres)
    port = free_port()
    server = start_server_process(tmp_path / "server", port, conf, workers=0)
    url = f"jdbc:hive2://127.0.0.1:{port}/default"
    survivor = victim = None
    try:
        # The victim dies right after its second lake commit, before telling
        # the coordinator: the worst moment for a duplicate.
        survivor = start_service_process(tmp_path / "svc-a", url, conf)
        victim = start_service_process(tmp_path / "svc-b", url, conf, fault="after-lake-commit@2")
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
        assert victim.wait(timeout=5) == -signal.SIGKILL
        wave()

        def all_tiered():
            return all(len(lake_ids(cur, f"scale_lake.t{n}")) >= len(inserted[n]) for n in range(TABLES))

        wait_for(all_tiered, 180, "every row in the lake")
        for n in range(TABLES):
            assert lake_ids(cur, f"scale_lake.t{n}") == inserted[n], f"t{n}: not exactly once"

        cur.execute("SELECT table_name, job_id, outcome, ended_at, error FROM sys.tiering_rounds ORDER BY ended_at")
        rounds = cur.fetchall()
        finished_by = {job for _, job, outcome, _, _ in rounds if outcome == "finished"}
        assert finished_by == {survivor_job, victim_job}, "tables were not spread over both jobs"
        timed_out = [(t, at, err) for t, job, outcome, at, err in rounds if outcome == "timed_out" and job == victim_job]
        assert timed_out, f"no round of the killed job timed out: {rounds}"
        table, at, error = timed_out[0]
        assert f"tiering job {victim_job} sent no heartbeat" in error
        assert any(t == table and job == survivor_job and outcome == "finished" and later > at
                   for t, job, outcome, later, _ in rounds), f"{table} did not move to the live job: {rounds}"

        def settled():
            cur.execute("SELECT table_name, status, last_error FROM sys.lake_tiering_status "
                        "WHERE database_name = 'scale'")
            statuses = cur.fetchall()
            return len(statuses) == TABLES and all(s[1] != "Failed" for s in statuses)

        wait_for(settled, 60, "no table left Failed")
    finally:
        for proc in (victim, survivor):
            if proc is not None:
                stop_process(proc)
        assert stop_process(server) == 0


def test_server_and_tiering_service_on_a_standalone_cluster(postgres, tmp_path):
    from tests.standalone import LocalStandalone

    cluster = LocalStandalone(cores=2, memory="2g").start()
    # One core and a small executor per app, so both fit on the 2-core worker.
    conf = COMMON + metastore_conf(postgres) + [
        f"tierlake.master={cluster.url}", "spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1",
        "spark.cores.max=1", "spark.executor.cores=1", "spark.executor.memory=512m",
    ]
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
