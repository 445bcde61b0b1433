"""An admin's login while the HTTP port is flooded with wrong passwords (issue 51, reproduction 4).

    PYTHONPATH=. python -m bench.http_flood [--clients 128] [--processes 8] [--seconds 30]

Starts ``tierlake server`` with a password file and a status-page port in its
own process, measures an admin's PyHive login + ``SELECT 1`` (10 times)
before the flood, then starts ``--clients`` HTTP clients spread over
``--processes`` processes, each sending ``/metrics`` with a wrong password
(HTTP Basic) as fast as it is answered, and measures the admin's login +
``SELECT 1`` again while they run. Prints both series' p50 and max, and what
the flooders were answered (401: refused after a password check; 503: over
the door's connection or check budget). The target: under 3 s during the flood.
"""

from __future__ import annotations

import argparse
import base64
import multiprocessing
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

from tests.conftest import free_port, start_server_process, stop_process


def _flood(url: str, threads: int, seconds: float, out) -> None:
    answers: Counter = Counter()
    lock = threading.Lock()
    bad = "Basic " + base64.b64encode(b"ann:wrong-password").decode()
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            request = urllib.request.Request(url, headers={"Authorization": bad})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    code = response.status
            except urllib.error.HTTPError as e:
                code = e.code
            except OSError as e:
                code = type(e).__name__
            with lock:
                answers[code] += 1

    workers = [threading.Thread(target=client, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put(dict(answers))


def _admin_login(port: int) -> float:
    from pyhive import hive

    started = time.perf_counter()
    conn = hive.connect("127.0.0.1", port, username="ann", password="ann-pw", auth="CUSTOM")
    cursor = conn.cursor()
    cursor.execute("SELECT 1")
    assert cursor.fetchall() == [(1,)]
    conn.close()
    return time.perf_counter() - started


def _series(port: int, n: int, pause: float) -> list[float]:
    out = []
    for _ in range(n):
        out.append(_admin_login(port))
        time.sleep(pause)
    return out


def _describe(name: str, values: list[float]) -> str:
    return f"{name}: p50 {statistics.median(values):.2f} s, max {max(values):.2f} s ({len(values)} logins)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    from tierlake.server.gateway.auth.passwords import set_user

    root = Path(tempfile.mkdtemp(prefix="tierlake-http-flood-"))
    passwords = root / "passwords"
    set_user(passwords, "ann", "ann-pw", frozenset({"admin"}))
    port, http_port = free_port(), free_port()
    server = start_server_process(root / "home", port, [f"tierlake.gateway.password-file={passwords}",
                                                        f"tierlake.http.port={http_port}"])
    try:
        _series(port, 3, 0.2)  # warm-up
        before = _series(port, 10, 0.5)
        queue: multiprocessing.Queue = multiprocessing.Queue()
        per = max(1, args.clients // args.processes)
        flooders = [multiprocessing.Process(target=_flood, args=(f"http://127.0.0.1:{http_port}/metrics", per,
                                                                 args.seconds, queue))
                    for _ in range(args.processes)]
        for f in flooders:
            f.start()
        time.sleep(min(5.0, args.seconds / 4))
        during = []
        deadline = time.monotonic() + args.seconds - 8
        while time.monotonic() < deadline:
            during.append(_admin_login(port))
            time.sleep(0.5)
        answers: Counter = Counter()
        for _ in flooders:
            answers.update(queue.get(timeout=args.seconds + 60))
        for f in flooders:
            f.join()
        print(f"{per * args.processes} HTTP clients in {args.processes} processes for {args.seconds:.0f} s; "
              f"they were answered {dict(answers)}")
        print(_describe("admin login + SELECT 1, idle", before))
        print(_describe("admin login + SELECT 1, during the flood", during))
    finally:
        stop_process(server)


if __name__ == "__main__":
    main()
