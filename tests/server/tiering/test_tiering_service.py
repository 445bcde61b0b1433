"""`tierlake tiering-service` beside `tierlake server`, both as users run them."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from pyhive import hive

from tests.conftest import free_port, subprocess_env, tierlake_command

pytestmark = pytest.mark.integration

CONF = ["--conf", "tierlake.master=local[1]", "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "tierlake.tiering.poll-interval=0.3 s"]


def launch(args):
    proc = subprocess.Popen(tierlake_command() + args + CONF, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=subprocess_env())
    line = proc.stdout.readline().strip()
    assert "ready" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line


def test_a_separate_tiering_service_tiers_and_keeps_its_job_id(tmp_path):
    port = free_port()
    server, _ = launch(["server", "--home", str(tmp_path / "server"), "--port", str(port), "--workers", "0",
                        "--conf", "tierlake.metastore.port=0"])
    url = f"jdbc:hive2://127.0.0.1:{port}/default"
    try:
        service, ready = launch(["tiering-service", "--url", url, "--home", str(tmp_path / "svc")])
        job_id = ready.split("jobs ", 1)[1].split(" -> ")[0]
        cur = hive.connect("127.0.0.1", port, username="t").cursor()
        cur.execute("CREATE DATABASE s")
        cur.execute("CREATE TABLE s.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                    "'table.datalake.freshness'='1 s')")
        cur.execute("INSERT INTO s.t VALUES (1), (2), (3)")
        deadline = time.monotonic() + 120
        rows = []
        while time.monotonic() < deadline and len(rows) < 3:
            cur.execute("SELECT id FROM s_lake.t")
            rows = cur.fetchall()
            time.sleep(1)
        assert sorted(r[0] for r in rows) == [1, 2, 3]
        cur.execute("SELECT job_id FROM sys.tiering_jobs")
        assert (job_id,) in cur.fetchall()
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0
        # The same service home keeps the same job id (and so the same lease id).
        service, ready = launch(["tiering-service", "--url", url, "--home", str(tmp_path / "svc")])
        assert ready.split("jobs ", 1)[1].split(" -> ")[0] == job_id
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)


def test_a_server_without_a_shared_metastore_is_refused_clearly(server, tmp_path):
    result = subprocess.run(
        tierlake_command() + ["tiering-service", "--url", f"jdbc:hive2://127.0.0.1:{server.gateway.port}/default",
                              "--home", str(tmp_path / "svc")],
        capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )
    assert result.returncode == 2
    assert "does not share its metastore" in result.stderr
    assert "tierlake.metastore.port" in result.stderr
