"""A server SIGKILLed during an atomic CTAS: nothing stays visible, and the
next start rolls the statement back and records it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from pyhive import hive

from tests.conftest import free_port, start_server_process

pytestmark = pytest.mark.integration

CONF = ["tierlake.master=local[2]", "spark.sql.shuffle.partitions=2", "tierlake.coordinator.interval=1 s"]
CTAS = ("CREATE TABLE crash.{name} TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='id', "
        "'bucket.num'='2') AS SELECT id, id * 2 AS v FROM range(500)")


def start(home: Path, port: int, fault: str | None = None) -> subprocess.Popen:
    return start_server_process(home, port, CONF, fault=fault)


def user_files(home: Path) -> set[str]:
    """Files under the warehouse outside sys (whose state tables change)."""
    root = home / "warehouse"
    return {str(Path(d) / f) for d, _, files in os.walk(root) for f in files
            if not Path(d).is_relative_to(root / "sys.db")}


def visible(cur) -> dict:
    cur.execute("SHOW DATABASES")
    databases = sorted(r[0] for r in cur.fetchall())
    tables = {}
    for d in ("crash", "crash_lake"):
        if d in databases:
            cur.execute(f"SHOW TABLES IN {d}")
            tables[d] = sorted(r[1] for r in cur.fetchall())
    cur.execute("SHOW TABLES IN sys")
    staged = sorted(r[1] for r in cur.fetchall() if r[1].startswith("ctas_") and r[1] != "ctas_journal")
    cur.execute("SELECT database_name, table_name FROM sys.tiering_tables")
    return {"databases": databases, "tables": tables, "staged": staged, "registered": sorted(cur.fetchall())}


def killed_during(proc: subprocess.Popen, cur, name: str) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the connection drops with the server (a Thrift transport error)
        cur.execute(CTAS.format(name=name))
    assert proc.wait(timeout=180) == -signal.SIGKILL


def test_sigkill_during_ctas_then_the_next_start_rolls_it_back(tmp_path):
    home, port = tmp_path / "home", free_port()
    # Killed after the query's rows were written to the staged stream table...
    proc = start(home, port, "ctas-after-write")
    cur = hive.connect("127.0.0.1", port, username="crash").cursor()
    cur.execute("CREATE DATABASE crash")
    before, files = visible(cur), user_files(home)
    killed_during(proc, cur, "a")
    # ...then in the middle of the commit: the stream table renamed into
    # place, the lake table not yet, no registration.
    proc = start(home, port, "ctas-during-commit")
    killed_during(proc, hive.connect("127.0.0.1", port, username="crash").cursor(), "b")

    proc = start(home, port)
    try:
        cur = hive.connect("127.0.0.1", port, username="crash").cursor()
        assert visible(cur) == before
        assert user_files(home) == files
        cur.execute("SELECT table_name, state, detail FROM sys.create_table_as_log ORDER BY started_at")
        log = cur.fetchall()
        assert [(t, s) for t, s, _ in log] == [("a", "rolled_back"), ("b", "rolled_back")]
        assert all("rolled back at start" in d for _, _, d in log)
        server_log = (home / "logs" / "tierlake.log").read_text()
        assert "CTAS" in server_log and "rolled back" in server_log
        # The names are free again: the same statement now succeeds.
        cur.execute(CTAS.format(name="b"))
        assert cur.fetchall()[0][1:3] == ("crash.b", "crash_lake.b")
        cur.execute("SELECT count(*) FROM crash_lake.b")
        assert cur.fetchall() == [(500,)]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
