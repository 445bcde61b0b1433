"""Logs: a hundred normal statements, in sessions that open and close, add no INFO line to the server's log
(``tierlake.log``); third-party libraries log at WARN; a round logs exactly one line."""

from __future__ import annotations

import logging
import re
import uuid

import pytest

from tests.server.tiering.conftest import run, wait_tiered

pytestmark = pytest.mark.integration

# Threads that work on their own timers, whatever clients do: a line of theirs is not the statements'.
# Each name is checked against the server's source below, so a renamed thread cannot silently widen the test.
BACKGROUND_THREADS = ("tierlake-housekeeping", "tierlake-backlog-probe", "tierlake-scheduler",
                      "tierlake-round-history", "tierlake-kv-maintenance", "tierlake-fresh-repin", "tierlake-branch")
BACKGROUND_PREFIXES = ("tiering-", "round-", "renew-")
BACKGROUND = re.compile(r"\[(" + "|".join(re.escape(n) for n in BACKGROUND_THREADS + BACKGROUND_PREFIXES) + ")")


def test_the_background_thread_names_are_the_servers():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "server"
    source = "\n".join(p.read_text(encoding="utf-8") for p in root.rglob("*.py"))
    missing = [name for name in BACKGROUND_THREADS if f'"{name}"' not in source]
    assert not missing, missing


def statements_of(db: str, n: int) -> tuple[str, ...]:
    """Four normal statements: a procedure, a status read, a stream INSERT, a query."""
    return ("CALL sys.version()", "SELECT * FROM sys.lake_tiering_status",
            f"INSERT INTO {db}.events VALUES ({n}, 'x')", f"SELECT count(*) FROM {db}.events")


def info_lines(path, start: int) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")[start:] if path.exists() else ""
    return [line for line in text.splitlines() if re.match(r"^\S+ \S+ INFO ", line) and not BACKGROUND.search(line)]


def size(path) -> int:
    return len(path.read_text(encoding="utf-8", errors="replace")) if path.exists() else 0


def test_a_hundred_statements_add_no_info_line(server):
    from pyhive import hive

    db = "quiet_" + uuid.uuid4().hex[:6]
    cur = hive.connect("127.0.0.1", server.gateway.port, username="tester").cursor()
    run(cur, f"CREATE DATABASE {db}")
    run(cur, f"CREATE TABLE {db}.events (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true')")
    # Once per process, the first statements log what they set up (which sys views the gateway caches).
    for statement in statements_of(db, 0):
        cur.execute(statement)
        if cur.description:
            cur.fetchall()
    cur.close()
    logs = server.config.logs_dir
    ours, spark_log = logs / "tierlake.log", logs / "spark.log"
    for handler in logging.getLogger().handlers:
        handler.flush()
    start, spark_start = size(ours), size(spark_log)
    statements = 0
    for n in range(25):  # each session opens, runs four statements and closes (its handles cancelled)
        conn = hive.connect("127.0.0.1", server.gateway.port, username="tester")
        cursor = conn.cursor()
        for statement in statements_of(db, n + 1):
            cursor.execute(statement)
            if cursor.description:
                cursor.fetchall()
            statements += 1
        cursor.close()
        conn.close()
    assert statements == 100
    for handler in logging.getLogger().handlers:
        handler.flush()
    added = info_lines(ours, start)
    assert not added, "\n".join(added[:20])
    # spark.log, the JVM's log, is at WARN by default (tierlake.log.jvm-level): Spark's INFO lines per
    # statement and job stay out of it too.
    added = info_lines(spark_log, spark_start)
    assert not added, "\n".join(added[:20])


def test_third_party_loggers_are_at_warn(server):
    for name in ("great_expectations", "py4j", "pyhive"):
        assert logging.getLogger(name).getEffectiveLevel() >= logging.WARNING, name


def test_a_round_logs_one_line_with_rows_bytes_duration_and_positions(server):
    from pyhive import hive

    from tests.conftest import running_workers

    db = "round_" + uuid.uuid4().hex[:6]
    cur = hive.connect("127.0.0.1", server.gateway.port, username="tester").cursor()
    run(cur, f"CREATE DATABASE {db}")
    run(cur, f"CREATE TABLE {db}.t (id BIGINT, v STRING) TBLPROPERTIES ("
             "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    ours = server.config.logs_dir / "tierlake.log"
    workers = running_workers(server, 1)
    next(workers)
    try:
        run(cur, f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b')")
        wait_tiered(server, f"{db}.t")
    finally:
        next(workers, None)
    cur.close()
    for handler in logging.getLogger().handlers:
        handler.flush()
    lines = [line for line in ours.read_text(encoding="utf-8").splitlines() if f"tiered {db}.t:" in line]
    rounds = [line for line in lines if re.search(r"tiered \S+: 2 rows, \d+ bytes in \d+\.\d\d s, positions 0\.\.\d+",
                                                    line)]
    assert len(rounds) == 1, lines
    # Nothing else at INFO names the table while its rounds ran (the scheduler's move is DEBUG).
    others = [line for line in ours.read_text(encoding="utf-8").splitlines()
              if " INFO " in line and f"{db}.t" in line and "tiered " not in line
              and "created" not in line]
    assert not others, others
