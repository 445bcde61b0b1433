"""`tierlake server` as a user runs it: a subprocess, the ready line, signals,
a second server on the same home, restart with state intact, `tierlake sql`."""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from tests.conftest import free_port, subprocess_env, tierlake_command
from tierlake.server.state import migrations

pytestmark = pytest.mark.integration

READY = re.compile(r"^tierlake ready: (jdbc:hive2://127\.0\.0\.1:(\d+)/default)"
                   r"( \(status page: http://127\.0\.0\.1:\d+/\))?$")


def _start(home, port, timeout=240):
    proc = subprocess.Popen(
        tierlake_command() + ["server", "--home", str(home), "--port", str(port), "--workers", "0",
                              "--conf", "tierlake.master=local[2]",
                              "--conf", "spark.sql.shuffle.partitions=2",
                              # The failed table must still be Failed after the restart: the
                              # coordinator's first tick (before the ready line) would retry it.
                              "--conf", "tierlake.tiering.retry-backoff=10 min"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
    )
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline()
    if not line and time.monotonic() < deadline:
        proc.wait(timeout=30)
        raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
    return proc, line.rstrip("\n")


def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=120)


def _sql(url, *statements):
    return subprocess.run(
        tierlake_command() + ["sql", "--url", url, *statements],
        capture_output=True, text=True, env=subprocess_env(), timeout=180,
    )


def test_server_lifecycle_restart_and_home_lock(tmp_path):
    home = tmp_path / "home"
    port = free_port()
    proc, line = _start(home, port)
    try:
        m = READY.match(line)
        assert m, line
        assert int(m.group(2)) == port
        url = m.group(1)
        # Nothing else reaches the console: the rest goes to $TIERLAKE_HOME/logs.
        assert (home / "logs" / "tierlake.log").exists()
        assert (home / "logs" / "spark.log").exists()

        second = subprocess.run(
            tierlake_command() + ["server", "--home", str(home), "--port", str(free_port())],
            capture_output=True, text=True, env=subprocess_env(), timeout=120,
        )
        assert second.returncode == 2
        assert "is in use by another tierlake process" in second.stderr
        assert f"pid {proc.pid}" in second.stderr
        # Another home on the same port: refused before Spark starts (a start takes a minute), saying what to do.
        third = subprocess.run(
            tierlake_command() + ["server", "--home", str(tmp_path / "other"), "--port", str(port)],
            capture_output=True, text=True, env=subprocess_env(), timeout=120,
        )
        assert third.returncode == 2, third.stderr
        assert f"port {port} on 127.0.0.1 is in use" in third.stderr and "--port N" in third.stderr, third.stderr
        assert not (tmp_path / "other" / "logs" / "spark.log").exists() or \
            "SparkContext" not in (tmp_path / "other" / "logs" / "spark.log").read_text()

        r = _sql(
            url,
            "CREATE DATABASE IF NOT EXISTS shop",
            "CREATE TABLE shop.orders (id BIGINT, amount DOUBLE) USING iceberg",
            "INSERT INTO shop.orders VALUES (1, 9.5), (2, 3.25)",
            "SELECT version, name FROM sys.schema_version ORDER BY version",
        )
        assert r.returncode == 0, r.stderr
        assert "0001_sys_base.sql" in r.stdout
        # Coordinator state to carry over the restart: one table tiered (with
        # a 10 min freshness: it must not fall due during the stop and start,
        # which take a minute on a loaded 2-core machine), one failed with an error.
        r = _sql(
            url,
            "CREATE TABLE shop.other (id BIGINT) USING iceberg",
            "ALTER TABLE shop.orders SET TBLPROPERTIES ('table.datalake.freshness' = '10 min')",
            "CALL sys.enable_tiering('shop.orders')",
            "CALL sys.enable_tiering('shop.other')",
            "CALL sys.heartbeat(job_id => 'j', request_table => true)",
            "CALL sys.heartbeat(job_id => 'j', request_table => true)",
        )
        assert r.returncode == 0, r.stderr
        epochs = dict(re.findall(r"\| assigned \| (\d+)\s+\| shop\.\w+\s+\| (\d+)", r.stdout))
        assert len(epochs) == 2, r.stdout
        orders_id, other_id = sorted(epochs, key=int)
        r = _sql(
            url,
            f"CALL sys.heartbeat(job_id => 'j', finished_tables => array(named_struct('table_id', {orders_id}L, "
            f"'tiering_epoch', {epochs[orders_id]}L, 'tiered_position', 3L)), failed_tables => array("
            f"named_struct('table_id', {other_id}L, 'tiering_epoch', {epochs[other_id]}L, "
            "'error_message', 'disk on fire')))",
        )
        assert r.returncode == 0 and "disk on fire" not in r.stdout, r.stderr
        before = _sql(url, "SELECT * FROM sys.lake_tiering_status ORDER BY table_name")
        assert "Failed" in before.stdout and "disk on fire" in before.stdout and "Scheduled" in before.stdout
        bad = _sql(url, "CALL sys.nope()")
        assert bad.returncode == 1
        assert "unknown procedure sys.nope" in bad.stderr and "state=42883" in bad.stderr
    finally:
        assert _stop(proc) == 0
    assert proc.stdout.read() == ""  # exactly one line on the console

    proc, line = _start(home, port)
    try:
        assert READY.match(line), line
        r = _sql(
            READY.match(line).group(1),
            "SELECT id, amount FROM shop.orders ORDER BY id",
            "SELECT count(*) AS applied FROM sys.schema_version",
            "SELECT count(*) AS views FROM sys.lake_tiering_status",
            "CALL sys.version()",
        )
        assert r.returncode == 0, r.stderr
        assert re.search(r"\|\s*1\s*\|\s*9\.5\s*\|", r.stdout)
        assert re.search(r"\|\s*2\s*\|\s*3\.25\s*\|", r.stdout)
        # Statuses, epochs, errors and last_tiered_time are as they were ...
        after = _sql(READY.match(line).group(1), "SELECT * FROM sys.lake_tiering_status ORDER BY table_name")
        assert after.stdout == before.stdout
        # ... and scheduling resumed from the last finished round: a shorter
        # freshness counts from its time (kept over the restart), so the table
        # is due at once, at the scheduler's next tick (every 5 s).
        shorter = _sql(READY.match(line).group(1),
                       "ALTER TABLE shop.orders SET TBLPROPERTIES ('table.datalake.freshness' = '1 s')")
        assert shorter.returncode == 0, shorter.stderr
        time.sleep(6)
        resumed = _sql(READY.match(line).group(1), "CALL sys.heartbeat(job_id => 'k', request_table => true)",
                       "CALL sys.heartbeat(job_id => 'k', request_table => true)")
        assert "shop.orders" in resumed.stdout and "assigned" in resumed.stdout, resumed.stdout
        # One row per migration: a restart does not re-run them.
        applied = re.search(r"\| applied \|\n\+-+\+\n\|\s*(\d+)\s*\|", r.stdout)
        assert applied and int(applied.group(1)) == len(migrations.available())
    finally:
        assert _stop(proc) == 0


def test_sql_cli_reports_errors_with_sqlstate(tmp_path):
    r = _sql(f"jdbc:hive2://127.0.0.1:{free_port()}/default", "SELECT 1")
    assert r.returncode == 2
    assert "cannot connect" in r.stderr
