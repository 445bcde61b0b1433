"""A reader's CPU bomb against its timeout, with an admin's query alongside (issue 51, item 2).

    PYTHONPATH=. python -m bench.statement_deadlines [--timeout 5] [--runs 3] [--bombs tasks,driver,sys,rows,analyser]

Starts ``tierlake server`` (``local[2]``, a password file with the reader
``rita`` and the admin ``ann``, ``tierlake.query.reader-timeout`` =
``--timeout`` seconds) in its own process. Measures the admin's PyHive
``SELECT count(*) FROM range(1000)`` idle, then for each bomb and run: starts
the reader's bomb, runs the admin's query over and over until the bomb's
error arrives, and afterwards samples the server's CPU use (its process and
the Spark JVM, from /proc) for 5 s. Prints, per bomb: when the reader's
error came, the admin's latency under the bomb against idle, and the cores
the server used 0–2 s and 2–5 s after the error (≈0 when the bomb's cores
are free; a bomb still running shows as ~1 or ~2).

Bombs:
- ``tasks``: every core, in 20,000 short tasks of digests (the statement's
  jobs are cancelled at the deadline, the tasks stop at their next batch);
- ``driver``: ``levenshtein`` of two 200,000-character literals, folded by
  the optimizer in the statement's thread (~150 s of one core, a few KB);
- ``sys``: the same folded over ``sys.procedures``, which the gateway
  answers through its own Spark sessions;
- ``rows``: two tasks of one row each whose ``levenshtein`` takes ~150 s
  (strings built from a column, so nothing is folded): the kill is read
  between rows, TaskReaper.java stops the tasks;
- ``analyser``: the folded ``levenshtein`` as an inline table's row, which
  the analyser evaluates itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from tests.conftest import free_port, start_server_process, stop_process

ADMIN_QUERY = "SELECT count(*) FROM range(1000)"
FOLDED = "levenshtein(repeat('a', 200000), repeat('b', 200000))"
BOMBS = {
    "tasks": "SELECT count(*) FROM range(0, 2000000000, 1, 20000) WHERE sha2(cast(id AS string), 256) = 'x'",
    "driver": f"SELECT {FOLDED} AS d",
    "sys": f"SELECT {FOLDED} AS d FROM sys.procedures LIMIT 1",
    # One row per task (two tasks, both cores) computing ~150 s each: Spark's kill is read between rows.
    "rows": ("SELECT levenshtein(repeat(cast(id AS string), 200000), repeat('b', 200000)) AS d "
             "FROM range(0, 2, 1, 2)"),
    # An inline table's row, evaluated by the analyser on the driver.
    "analyser": f"SELECT d FROM VALUES ({FOLDED}) AS t(d)",
}
TICKS = os.sysconf("SC_CLK_TCK")


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return pids


def _cpu_seconds(pid: int) -> float:
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / TICKS


def _cores(pid: int, seconds: float) -> float:
    cpu, started = _cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (_cpu_seconds(pid) - cpu) / (time.monotonic() - started)


def _connect(port: int, user: str):
    from pyhive import hive

    return hive.connect("127.0.0.1", port, username=user, password=f"{user}-pw", auth="CUSTOM").cursor()


def _admin(cursor) -> float:
    started = time.perf_counter()
    cursor.execute(ADMIN_QUERY)
    assert cursor.fetchall() == [(1000,)]
    return time.perf_counter() - started


def _bomb(port: int, statement: str, out: dict) -> None:
    reader = _connect(port, "rita")
    started = time.monotonic()
    try:
        reader.execute(statement)
        reader.fetchall()
        out["error"] = "no error"
    except Exception as e:  # noqa: BLE001 - the bomb's error is what is measured
        status = getattr(e.args[0], "status", None) if e.args else None
        out["error"] = (status.errorMessage if status is not None else str(e)).split("\n", 1)[0][:140]
    out["seconds"] = time.monotonic() - started
    out["at"] = time.monotonic()


def _summary(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {statistics.median(values):.2f} s, max {max(values):.2f} s ({len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=int, default=5, help="tierlake.query.reader-timeout, seconds")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bombs", default="tasks,driver,sys,rows,analyser")
    args = parser.parse_args()
    from tierlake.server.gateway.auth.passwords import set_user

    root = Path(tempfile.mkdtemp(prefix="tierlake-deadlines-"))
    passwords = root / "passwords"
    set_user(passwords, "ann", "ann-pw", frozenset({"admin"}))
    set_user(passwords, "rita", "rita-pw", frozenset({"reader"}))
    port = free_port()
    server = start_server_process(root / "home", port, [
        "tierlake.master=local[2]", f"tierlake.gateway.password-file={passwords}",
        f"tierlake.query.reader-timeout={args.timeout} s"])
    try:
        admin = _connect(port, "ann")
        for _ in range(3):
            _admin(admin)  # warm-up
        idle = [_admin(admin) for _ in range(10)]
        print(f"reader timeout {args.timeout} s; admin's {ADMIN_QUERY} idle: {_summary(idle)}; "
              f"server's cores idle: {_cores(server.pid, 3):.2f}")
        for name in args.bombs.split(","):
            for run in range(1, args.runs + 1):
                out: dict = {}
                bombing = threading.Thread(target=_bomb, args=(port, BOMBS[name], out), daemon=True)
                bombing.start()
                time.sleep(0.5)
                busy = []
                while bombing.is_alive():
                    latency = _admin(admin)
                    if bombing.is_alive():
                        busy.append(latency)
                bombing.join()
                early, late = _cores(server.pid, 2), _cores(server.pid, 3)
                print(f"{name} #{run}: the reader's error after {out['seconds']:.1f} s ({out['error']}); "
                      f"admin under the bomb {_summary(busy)}; server's cores 0-2 s after the error "
                      f"{early:.2f}, 2-5 s after {late:.2f}")
    finally:
        stop_process(server)


if __name__ == "__main__":
    main()
