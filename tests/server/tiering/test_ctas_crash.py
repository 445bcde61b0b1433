"""A server SIGKILLed during an atomic CTAS. Killed before its commit point
(the first rename), nothing stays visible and the next start rolls the
statement back; killed after it (between the renames, or between the renames
and the registration), the next start finishes it: registered, tiered,
nothing lost, nothing tiered twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pyhive import hive

from tests.conftest import free_port, start_server_process

pytestmark = pytest.mark.integration

CONF = ["tierlake.master=local[2]", "spark.sql.shuffle.partitions=2", "tierlake.coordinator.interval=1 s",
        "tierlake.tiering.poll-interval=0.3 s"]
PK = ", 'primary-key'='id', 'bucket.num'='2'"
CTAS = ("CREATE TABLE crash.{name} TBLPROPERTIES ('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s'"
        "{props}) AS SELECT id, id * 2 AS v FROM range(500)")


def start(home: Path, port: int, fault: str | None = None, workers: int = 0) -> subprocess.Popen:
    return start_server_process(home, port, CONF, workers=workers, fault=fault)


def connect(port: int):
    return hive.connect("127.0.0.1", port, username="crash").cursor()


def rows(cur, statement: str) -> list[tuple]:
    cur.execute(statement)
    return cur.fetchall()


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


def killed_during(proc: subprocess.Popen, cur, name: str, props: str = PK) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the connection drops with the server (a Thrift transport error)
        cur.execute(CTAS.format(name=name, props=props))
    assert proc.wait(timeout=180) == -signal.SIGKILL


def test_sigkill_before_the_commit_point_then_the_next_start_rolls_it_back(tmp_path):
    home, port = tmp_path / "home", free_port()
    # Killed after the query's rows were written and tiered into the staged
    # tables (phase `written`), before either was renamed into place.
    proc = start(home, port, "ctas-after-write")
    cur = connect(port)
    cur.execute("CREATE DATABASE crash")
    before, files = visible(cur), user_files(home)
    killed_during(proc, cur, "a")

    proc = start(home, port)
    try:
        cur = connect(port)
        assert visible(cur) == before
        assert user_files(home) == files
        log = rows(cur, "SELECT table_name, state, detail FROM sys.create_table_as_log ORDER BY started_at")
        assert [(t, s) for t, s, _ in log] == [("a", "rolled_back")]
        assert "rolled back at start" in log[0][2]
        server_log = (home / "logs" / "tierlake.log").read_text()
        assert "CTAS" in server_log and "rolled back" in server_log
        # The name is free again: the same statement now succeeds.
        cur.execute(CTAS.format(name="a", props=PK))
        assert cur.fetchall()[0][1:3] == ("crash.a", "crash_lake.a")
        assert rows(cur, "SELECT count(*) FROM crash_lake.a") == [(500,)]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0


def wait_rounds(cur, tables: set[str], timeout: float = 180) -> dict[str, list[tuple]]:
    """Each table's finished rounds, once every one of ``tables`` has one."""
    deadline = time.monotonic() + timeout
    while True:
        found: dict[str, list[tuple]] = {}
        for table, start_position, end_position, count in rows(
                cur, "SELECT table_name, start_position, end_position, rows FROM sys.tiering_rounds "
                     "WHERE database_name = 'crash' AND outcome = 'finished' ORDER BY ended_at"):
            found.setdefault(table, []).append((start_position, end_position, count))
        if set(found) >= tables or time.monotonic() > deadline:
            return found
        time.sleep(1)


def test_sigkill_after_the_commit_point_then_the_next_start_finishes_it(tmp_path):
    home, port = tmp_path / "home", free_port()
    # Killed between the two renames: the stream table in place (users can
    # see it), the lake table still staged, nothing registered...
    proc = start(home, port, "ctas-during-commit")
    cur = connect(port)
    cur.execute("CREATE DATABASE crash")
    killed_during(proc, cur, "b")
    # ...and (a log table this time) after both renames, before the
    # registration. This start recovers b before it is killed in c.
    proc = start(home, port, "ctas-after-rename")
    killed_during(proc, connect(port), "c", props="")

    proc = start(home, port, workers=1)
    try:
        cur = connect(port)
        state = visible(cur)
        assert state["tables"] == {"crash": ["b", "c"], "crash_lake": ["b", "c"]} and state["staged"] == []
        assert state["registered"] == [("crash", "b"), ("crash", "c")]
        log = rows(cur, "SELECT table_name, state, phase, detail FROM sys.create_table_as_log ORDER BY started_at")
        assert [r[:3] for r in log] == [("b", "recovered", "written"), ("c", "recovered", "renamed")]
        assert all("registered at start" in r[3] for r in log)
        assert "finished: registered at position" in (home / "logs" / "tierlake.log").read_text()
        status = rows(cur, "SELECT table_name, last_error FROM sys.lake_tiering_status "
                           "WHERE database_name = 'crash' ORDER BY table_name")
        assert status == [("b", None), ("c", None)]
        # Every row of the CTAS in both tables.
        for table in ("crash.b", "crash_lake.b", "crash.c", "crash_lake.c"):
            assert rows(cur, f"SELECT count(*), count(DISTINCT id), sum(v) FROM {table}") == [(500, 500, 249500)]

        # Later writes are tiered, and only they: an upsert and new keys into
        # the primary-key table, new rows into the log table.
        positions = dict(rows(cur, "SELECT table_name, tiered_position FROM sys.ctas_journal "
                                   "WHERE database_name = 'crash'"))
        cur.execute("INSERT INTO crash.b (id, v, _change_type) VALUES (0, -1, '+U'), (500, 1000, NULL), "
                    "(501, 1002, NULL)")
        cur.execute("INSERT INTO crash.c VALUES (500, 1000), (501, 1002)")
        rounds = wait_rounds(cur, {"b", "c"})
        assert set(rounds) == {"b", "c"}, rounds
        # The first round after the recovered CTAS starts at the CTAS's
        # position and carries only the new rows: nothing tiered twice.
        assert rounds["b"][0][0] == positions["b"] and sum(r[2] for r in rounds["b"]) == 3
        assert rounds["c"][0][0] == positions["c"] and sum(r[2] for r in rounds["c"]) == 2
        assert rows(cur, "SELECT count(*), count(DISTINCT id), sum(v) FROM crash_lake.b") == [(502, 502, 251501)]
        assert rows(cur, "SELECT v FROM crash_lake.b WHERE id = 0") == [(-1,)]
        assert rows(cur, "SELECT count(*), count(DISTINCT id), sum(v) FROM crash_lake.c") == [(502, 502, 251502)]
        assert rows(cur, "SELECT table_name, last_error FROM sys.lake_tiering_status "
                         "WHERE database_name = 'crash' ORDER BY table_name") == [("b", None), ("c", None)]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
