"""A fresh view re-pinned by a tiering service in its own process while the
server truncates the log and the service's maintenance expires snapshots
(issue 40; docs/tiering.md, "Fresh views"): as users run them, through the
gateway only.

A writer appends counter values 1, 2, 3, … (one commit each). Rounds run in
the tiering service every second, each followed by managed maintenance
(``min-retained = 1``); the server's KV maintenance truncates the log every
second (re-pinning the view first), up to the pin, of commits older than
``table.log.ttl = 30 s``, and expires the stream snapshots before it. (A removal that deletes data files fails a
query still running on the files of an older pin, as on any Iceberg table:
the TTL, and compaction off, keep files for queries in flight. With a TTL of
0 s this test saw exactly that, a running query's stream file deleted under
it; reading the stream's ``all_entries`` it saw a manifest deleted, which is
why the view no longer reads ``all_entries``: FreshEntries.java.) Every
query of the fresh view must see exactly 1..n for an n at least what was
committed before it and never smaller than an earlier
query's: no error, no row twice, none missed, never back.

A soak, not part of the suite: three JVMs on a 2-core machine take minutes,
and the truncations it waits for come only as fast as the machine lets the
server's maintenance run (on a loaded CI machine none came in 6 minutes).
Run it with ``.venv/bin/python -m pytest bench/soak_fresh_view_processes.py``.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest
from pyhive import hive

from tests.conftest import free_port, subprocess_env, tierlake_command

pytestmark = pytest.mark.integration

CONF = ["--conf", "tierlake.master=local[1]", "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "tierlake.tiering.poll-interval=0.3 s"]


def launch(args: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(tierlake_command() + args + CONF, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=subprocess_env())
    line = proc.stdout.readline().strip()
    assert "ready" in line, (line, proc.poll())
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_a_tiering_service_repins_while_the_server_truncates_and_expires(tmp_path):
    port = free_port()
    server = launch(["server", "--home", str(tmp_path / "server"), "--port", str(port), "--workers", "0",
                     "--conf", "tierlake.metastore.port=0", "--conf", "tierlake.kv.maintenance-interval=1 s",
                     "--conf", "tierlake.maintenance.interval=1 s"])
    service = None
    try:
        service = launch(["tiering-service", "--url", f"jdbc:hive2://127.0.0.1:{port}/default",
                          "--home", str(tmp_path / "svc")])
        cur = hive.connect("127.0.0.1", port, username="t").cursor()
        cur.execute("CREATE DATABASE p")
        cur.execute("CREATE TABLE p.c (id BIGINT, seq BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                    "'table.datalake.freshness'='1 s', 'table.log.ttl'='30 s', "
                    "'table.datalake.snapshot.min-retained'='1', 'table.datalake.auto-compaction'='false')")
        written, stop_writing, errors = [0], threading.Event(), []

        def write() -> None:
            writer = hive.connect("127.0.0.1", port, username="w").cursor()
            try:
                while not stop_writing.is_set():
                    n = written[0] + 1
                    writer.execute(f"INSERT INTO p.c VALUES ({n}, {n})")
                    written[0] = n
            except Exception as e:  # noqa: BLE001 - reported by the test
                errors.append(e)

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        seen, log_starts, lake_rows = [], set(), []
        deadline = time.monotonic() + 360
        try:
            # Until the server truncated the log several times under the view (bounded).
            while len(log_starts) < 4 and time.monotonic() < deadline and not errors:
                floor = written[0]
                cur.execute("SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM p_fresh.c")
                ((count, distinct, low, high),) = cur.fetchall()
                assert count == distinct, f"a counter value seen twice: {count} rows, {distinct} distinct"
                assert count == 0 or (low, high) == (1, count), f"a gap: {count} rows from {low} to {high}"
                assert count >= floor, f"{floor} values were committed before the query, it saw {count}"
                assert not seen or count >= seen[-1], f"the view moved back: {seen[-1]} rows, then {count}"
                seen.append(count)
                cur.execute("SHOW TBLPROPERTIES p.c ('tierlake.log.start-position')")
                start = cur.fetchall()[0][1]
                if str(start).isdigit() and int(start) > 0:
                    log_starts.add(int(start))
                cur.execute("SELECT count(*) FROM p_lake.c")
                lake_rows.append(cur.fetchall()[0][0])
        finally:
            stop_writing.set()
            thread.join(timeout=60)
        assert not errors, errors
        assert len(log_starts) >= 4, f"the log was truncated at {sorted(log_starts)} only (queries: {len(seen)})"
        assert len(set(lake_rows)) >= 4, "too few rounds overlapped the queries"
    finally:
        if service is not None:
            stop(service)
        stop(server)
