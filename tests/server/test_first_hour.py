"""The first hour, as a new user meets it through the CLI: a taken status-page
port refused before Spark starts, and ``tierlake sql`` saying OK after an
INSERT into a stream table (the gateway's own answer) rather than an empty
``Result`` table."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from tests.conftest import free_port, subprocess_env, tierlake_command

pytestmark = pytest.mark.integration


def test_a_taken_status_page_port_is_refused_before_spark_starts(tmp_path):
    home = tmp_path / "home"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            tierlake_command() + ["server", "--home", str(home), "--port", str(free_port()), "--workers", "0",
                                  "--conf", f"tierlake.http.port={port}"],
            capture_output=True, text=True, env=subprocess_env(), timeout=300)
        took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr, done.stderr
    assert "tierlake.http.port" in done.stderr, done.stderr
    spark_log = home / "logs" / "spark.log"
    assert not spark_log.exists() or "SparkContext" not in spark_log.read_text(), "Spark was started"
    assert took < 60, took  # a Spark start alone takes longer on this machine


def _sql(port: int, *statements: str) -> subprocess.CompletedProcess:
    return subprocess.run(tierlake_command() + ["sql", "--url", f"jdbc:hive2://127.0.0.1:{port}/default",
                                                *statements],
                          capture_output=True, text=True, env=subprocess_env(), timeout=180)


def test_tierlake_sql_says_ok_after_an_insert(server):
    port = server.gateway.port
    done = _sql(port, "CREATE DATABASE IF NOT EXISTS first_hour",
                "DROP TABLE IF EXISTS first_hour.events",
                "CREATE TABLE first_hour.events (id BIGINT, what STRING) "
                "TBLPROPERTIES ('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')",
                "CREATE TABLE IF NOT EXISTS first_hour.plain (id BIGINT) USING iceberg")
    assert done.returncode == 0, done.stderr
    for insert in ("INSERT INTO first_hour.events VALUES (1, 'a'), (2, 'b')",  # the gateway's own answer
                   "INSERT INTO first_hour.plain VALUES (1)"):  # Spark's
        done = _sql(port, insert)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "OK\n", (insert, done.stdout)
    done = _sql(port, "SELECT count(*) AS n FROM first_hour.events")
    assert done.returncode == 0 and "| 2 |" in done.stdout and "(1 row)" in done.stdout, done.stdout
