"""Shared fixtures. One tierlake server (one SparkSession) per test process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(items):
    # A test that uses the server (or anything that starts a JVM) is an
    # integration test, whatever its module says.
    for item in items:
        if {"server", "spark", "beeline", "postgres"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The real thing: Spark + Iceberg + sys schema + Thrift Server + gateway."""
    from tierlake.server.app import Server
    from tierlake.server.config.config import Config
    from tierlake.server.runtime.log_setup import configure_python_logging

    home = tmp_path_factory.mktemp("tierlake-home")
    config = Config.load(
        home=home,
        conf={
            "tierlake.master": "local[2]",
            "tierlake.gateway.port": "0",
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "2g",
            # Short coordinator timings so timeouts and back-offs are testable.
            "tierlake.tiering.heartbeat-timeout": "8 s",
            "tierlake.tiering.retry-backoff": "2 s",
            "tierlake.coordinator.interval": "1 s",
            # Tiering tests start their own workers (tests/server/tiering).
            "tierlake.tiering.workers": "0",
            "tierlake.tiering.poll-interval": "0.2 s",
        },
    )
    configure_python_logging(config.logs_dir)
    srv = Server(config).start()
    _started.append(srv)
    yield srv
    _started.clear()
    srv.stop()


_started: list = []  # the session's server, once a test asked for it


@pytest.fixture(scope="module", autouse=True)
def _park_tables_after_module():
    """Each module's tables leave the schedule with it. The server is shared by
    the whole run and most tests make their tables due within a freshness of
    hours; a table still Pending from an earlier module would otherwise be
    handed to the next module's workers and hand-driven jobs (``heartbeat
    request_table`` gives out the oldest Pending table first)."""
    yield
    if _started:
        park_all_tables(_started[0])


def park_all_tables(server) -> None:
    """Every registered table Scheduled, unassigned, due in 2100; a round in
    progress is fenced (its epoch moves on)."""
    from datetime import datetime, timezone

    from tierlake.server.coordinator.state_machine import Status

    never = datetime(2100, 1, 1, tzinfo=timezone.utc)

    def park(states, now):
        changed = False
        for state in states.values():
            if state.status is Status.SCHEDULED and state.next_due == never and state.job_id is None:
                continue
            if state.status is Status.TIERING:
                state.tiering_epoch += 1
            state.status, state.job_id, state.next_due = Status.SCHEDULED, None, never
            state.pending_since = state.round_started = None
            changed = True
        return None, changed, []

    server.coordinator.mutate(park)


@pytest.fixture(scope="session")
def spark(server):
    return server.spark


@pytest.fixture
def hive_cursor(server):
    """A PyHive cursor through the gateway (SASL PLAIN), closed after the test."""
    from pyhive import hive

    conn = hive.connect("127.0.0.1", server.gateway.port, username="tester")
    yield conn.cursor()
    conn.close()


def _java_classpath() -> str:
    from tierlake.server.runtime.jars import pyspark_jars_dir

    return str(pyspark_jars_dir() / "*")


class Beeline:
    """beeline (Hive JDBC) from pyspark's own jars."""

    def __init__(self, port: int):
        self.port = port

    def run(self, script: str, url_options: str = "", timeout: int = 120) -> subprocess.CompletedProcess:
        import tempfile

        url = f"jdbc:hive2://127.0.0.1:{self.port}/default{url_options}"
        # A script file, not -e: beeline runs "-e" text as one command, so
        # "!tables" followed by SQL would be read as a single line.
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as f:
            f.write(script if script.endswith("\n") else script + "\n")
            f.flush()
            return subprocess.run(
                ["java", "-cp", _java_classpath(), "org.apache.hive.beeline.BeeLine",
                 "-u", url, "-n", "beeline-user", "--silent=true", "--outputformat=csv2",
                 "--showHeader=true", "-f", f.name],
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            )


@pytest.fixture(scope="session")
def beeline(server):
    return Beeline(server.gateway.port)


def running_workers(server, count: int):
    """Generator for fixtures: ``count`` tiering worker threads on ``server``,
    stopped and joined at teardown."""
    from tierlake.server.tiering.worker import start_workers

    started = start_workers(server, count)
    yield started
    for w in started:
        w.stop()
    for w in started:
        w.join(timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tierlake_command() -> list[str]:
    return [sys.executable, "-m", "tierlake.server.cli"]


def start_server_process(home, port: int, conf: list[str], workers: int = 0, fault: str | None = None,
                         env: dict[str, str] | None = None, own_group: bool = False):
    """``tierlake server`` in a subprocess, returned once it printed its ready
    line; ``fault`` sets TIERLAKE_FAULT (server/faults.py), ``env`` more
    variables; ``own_group``: in a process group of its own (a test signals the group)."""
    args = tierlake_command() + ["server", "--home", str(home), "--port", str(port), "--workers", str(workers)]
    for c in conf:
        args += ["--conf", c]
    env = subprocess_env(**({"TIERLAKE_FAULT": fault} if fault else {}), **(env or {}))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=own_group)
    line = proc.stdout.readline()
    assert line.startswith("tierlake ready:"), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def start_service_process(home, url: str, conf: list[str], workers: int = 1, fault: str | None = None):
    """``tierlake tiering-service`` in a subprocess, returned with its job ids
    once it printed its ready line; ``fault`` sets TIERLAKE_FAULT."""
    args = tierlake_command() + ["tiering-service", "--url", url, "--home", str(home), "--workers", str(workers)]
    for c in conf:
        args += ["--conf", c]
    env = subprocess_env(**({"TIERLAKE_FAULT": fault} if fault else {}))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return proc


def service_ready(proc) -> list[str]:
    """Wait for a service's ready line; its job ids."""
    line = proc.stdout.readline()
    stderr = proc.stderr.read() if proc.poll() is not None else ""
    assert line.startswith("tierlake tiering-service ready:"), (line, stderr)
    proc.ready_line = line.strip()
    return line.split("jobs ", 1)[1].split(" -> ")[0].split(", ")


def stop_process(proc, timeout: float = 120) -> int | None:
    """SIGTERM, then SIGKILL if it does not stop in time; its exit status."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@pytest.fixture(scope="session")
def postgres():
    """One throwaway PostgreSQL on loopback for the test session
    (tests/postgres.py); each test creates its own database in it."""
    from tests.postgres import LocalPostgres, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    pg = LocalPostgres(free_port()).start()
    yield pg
    pg.stop()


def wait_for(predicate, timeout: float, what: str, every: float = 1.0):
    """``predicate()``'s first truthy value, polled every ``every`` seconds for up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def make_iceberg_tables(spark, database: str, names: list[str]) -> None:
    """Plain Iceberg tables for coordinator tests (the DDL path comes with tiering)."""
    from tierlake import sql as sqlfiles

    spark.sql(f"CREATE DATABASE IF NOT EXISTS {sqlfiles.quote_ident(database)}")
    for name in names:
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {sqlfiles.quote_table(database, name)} (id BIGINT, v STRING) USING iceberg"
        )
