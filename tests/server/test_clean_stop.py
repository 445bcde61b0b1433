"""Stopping the server mid-round with writers inserting: SIGINT, SIGTERM to the
process, SIGTERM to its whole process group (as systemd sends it) stop it in
order and exit 0 with ``stopped`` in the log; after ``kill -9`` as after a clean
stop, the restarted job releases the round it owned at once (not after the
heartbeat timeout), and every acknowledged row is tiered exactly once.

Each case runs its own ``tierlake server`` in a process group of its own."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.conftest import free_port, start_server_process, stop_process, wait_for
from tests.server.ingest.test_ingest_durability import (
    TABLES,
    Writer,
    create_tables,
    expected_ids,
    lake_ids,
    query,
    resend,
)

pytestmark = pytest.mark.integration

# Long enough that only the restarted job's release can free a round its earlier run owned in time.
CONF = ["tierlake.tiering.heartbeat-timeout=10 min"]


def log_text(home) -> str:
    path = home / "logs" / "tierlake.log"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""



@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGTERM to the group", "kill -9"])
def test_a_stop_mid_round_with_writers_loses_nothing(tmp_path, how):
    port, home, resume = free_port(), tmp_path / "home", tmp_path / "resume"
    # Every round waits before its lake commit until `resume` exists: the stop lands mid-round.
    pause = {"TIERLAKE_FAULT_PAUSE": "before-commit", "TIERLAKE_FAULT_RESUME": str(resume)}
    server = start_server_process(home, port, CONF, workers=1, env=pause, own_group=True)
    try:
        create_tables(port)
        writers = [Writer(port, table, n) for n, table in enumerate(list(TABLES) * 2)]
        for w in writers:
            w.start()
        wait_for(lambda: "paused at before-commit" in log_text(home)
                 and sum(len(w.acked) for w in writers) >= 20, 120, "a round in progress and acknowledged writes", 0.2)
        if how == "SIGINT":
            os.kill(server.pid, signal.SIGINT)
        elif how == "SIGTERM":
            os.kill(server.pid, signal.SIGTERM)
        elif how == "SIGTERM to the group":
            os.killpg(server.pid, signal.SIGTERM)
        else:
            os.kill(server.pid, signal.SIGKILL)
        if how != "kill -9":
            time.sleep(1)
            resume.touch()  # the running round goes on to its lake commit while the server stops
        status = server.wait(timeout=300)
        for w in writers:
            w.stop.set()
            w.join(timeout=60)
        resume.touch()
        if how == "kill -9":
            assert status == -signal.SIGKILL
        else:
            assert status == 0, server.stderr.read()[-5000:]
            lines = log_text(home).strip().splitlines()
            assert lines[-1].endswith("stopped"), lines[-5:]
            assert f"{how.split()[0]} received: stopping" in log_text(home)
            assert "cannot schedule new futures" not in log_text(home)
            assert "is not an Iceberg table" not in log_text(home)

        server = start_server_process(home, port, CONF, workers=1, own_group=True)
        for w in writers:  # the statement each writer had in flight, sent again with its request id
            resend(port, w, w.acked[-1:] + w.unknown)
        for table in TABLES:
            ids = sorted(r[0] for r in query(port, f"SELECT id FROM {table}"))
            assert ids == expected_ids(writers, table), f"{table}: an acknowledged row lost or written twice"
        # Far sooner than the 10-minute heartbeat timeout: the restarted job released its old round.
        lake = lake_ids(port, writers, timeout=90)
        assert all(lake[t] == expected_ids(writers, t) for t in TABLES), "a row not tiered exactly once"
        rows = query(port, "SELECT status FROM sys.lake_tiering_status")
        assert all(r[0] != "Failed" for r in rows), rows
        outcomes = [r[0] for r in query(port, "SELECT outcome FROM sys.tiering_rounds")]
        if how == "kill -9":
            assert "abandoned" in outcomes, outcomes
    finally:
        stop_process(server)


def _tgkill(pid: int, tid: int, sig: int) -> None:
    """Send ``sig`` to one thread of ``pid`` (the kernel picks any thread for a signal to the process)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    SYS_tgkill = {"x86_64": 234, "aarch64": 131}[os.uname().machine]
    if libc.syscall(SYS_tgkill, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill {pid} {tid}")


def test_a_signal_taken_by_another_thread_stops_the_server_within_a_second(tmp_path):
    """A signal to the process may be delivered to any of its threads; Python runs the handler in the
    main thread, which must not sleep through it in an untimed wait (SIGTERM once went unnoticed for
    minutes). Here SIGTERM goes to every thread but the main one."""
    port, home = free_port(), tmp_path / "home"
    server = start_server_process(home, port, [], workers=0, own_group=True)
    try:
        time.sleep(1)
        threads = [int(t) for t in os.listdir(f"/proc/{server.pid}/task") if int(t) != server.pid]
        assert threads
        sent = time.monotonic()
        for tid in threads:
            try:
                _tgkill(server.pid, tid, signal.SIGTERM)
            except OSError:
                pass  # a thread that ended meanwhile
        wait_for(lambda: "SIGTERM received: stopping" in log_text(home), 10, "the SIGTERM to be acted on", 0.05)
        assert time.monotonic() - sent < 2.0  # within a second, with slack for a loaded machine
        assert server.wait(timeout=120) == 0
    finally:
        stop_process(server)


# Issue 54 item 4: SIGTERM to the group, writers and rounds running, RUNS times over one home. Each run
# is a server start and stop (25-40 s on an idle 2-core machine): the suite runs 2, the 20 the issue asks
# for run with TIERLAKE_CLEAN_STOP_RUNS=20 (bench/RESULTS.md, "Clean stops").
RUNS = int(os.environ.get("TIERLAKE_CLEAN_STOP_RUNS", "2"))
# "Acted on within a second": the handler's log line, with slack for a loaded machine.
ACTED_ON_S = 2.0
# A clean stop: statements drained (up to 30 s), the running round finished, Spark stopped.
STOPPED_S = 90.0


# Each run is a server start and stop (most of its time): bounded per run, not by the suite's 900 s.
@pytest.mark.timeout(RUNS * 240 + 300)
def test_sigterm_to_the_group_with_writers_and_rounds_stops_cleanly_every_time(tmp_path):
    """Each run: start the server on the same home, check that what earlier runs acknowledged is there
    exactly once, start four writers, wait for a round, send SIGTERM to the process group at a varying
    moment, and check that the server says so at once and exits 0 in order. At the end every
    acknowledged row is in the lake exactly once."""
    port, home = free_port(), tmp_path / "home"
    writers: list[Writer] = []
    acted, stopped, starts = [], [], []
    server = None
    try:
        for run in range(RUNS + 1):
            begun = time.monotonic()
            server = start_server_process(home, port, CONF, workers=1, own_group=True)
            starts.append(time.monotonic() - begun)
            if run == 0:
                create_tables(port)
            for w in writers[-4:]:  # the statements in flight at the stop, sent again with their request ids
                resend(port, w, w.acked[-1:] + w.unknown)
            for table in TABLES:
                ids = [r[0] for r in query(port, f"SELECT id FROM {table}")]
                assert sorted(ids) == expected_ids(writers, table), f"run {run}, {table}: a row lost or doubled"
            events = [r[0] for r in query(port, "SELECT id FROM shop_lake.events")]
            assert len(events) == len(set(events)), f"run {run}: a row tiered twice"
            if run == RUNS:
                break
            text = log_text(home)
            signals, rounds = text.count("SIGTERM received: stopping"), text.count("tiered shop.")
            batch = [Writer(port, table, run * 10 + k) for k, table in enumerate(list(TABLES) * 2)]
            writers += batch
            for w in batch:
                w.start()
            wait_for(lambda rounds=rounds, batch=batch: log_text(home).count("tiered shop.") > rounds
                     and sum(len(w.acked) for w in batch) >= 8, 120, "a round and acknowledged writes", 0.1)
            time.sleep((run % 5) * 0.25)  # mid-round, between rounds, mid-commit: a different moment each run
            sent = time.monotonic()
            os.killpg(server.pid, signal.SIGTERM)
            wait_for(lambda signals=signals: log_text(home).count("SIGTERM received: stopping") > signals, 30,
                     "the SIGTERM to be acted on", 0.05)
            acted.append(time.monotonic() - sent)
            status = server.wait(timeout=STOPPED_S)
            stopped.append(time.monotonic() - sent)
            for w in batch:
                w.stop.set()
                w.join(timeout=60)
            assert status == 0, (run, server.stderr.read()[-5000:])
            lines = log_text(home).strip().splitlines()
            assert lines[-1].endswith("stopped"), (run, lines[-5:])
            assert acted[-1] < ACTED_ON_S, f"run {run}: SIGTERM acted on after {acted[-1]:.1f} s"
            assert sum(len(w.acked) for w in batch) >= 8
        lake = lake_ids(port, writers, timeout=120)
        assert all(lake[t] == expected_ids(writers, t) for t in TABLES), "a row not tiered exactly once"
        assert all(r[0] != "Failed" for r in query(port, "SELECT status FROM sys.lake_tiering_status"))
        assert "cannot schedule new futures" not in log_text(home)
    finally:
        if server is not None:
            stop_process(server)
        print(f"\n{len(acted)} stops: SIGTERM acted on in at most {max(acted, default=0):.2f} s, "
              f"stopped in {min(stopped, default=0):.1f}..{max(stopped, default=0):.1f} s; "
              f"started in {min(starts, default=0):.1f}..{max(starts, default=0):.1f} s")
