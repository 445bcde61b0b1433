"""Many tables, always fresh (issue 18): how many log tables one default
server keeps within their freshness.

    PYTHONPATH=. python -m bench.bench_many_tables [--tables 20,50,100] [--freshness 10] [--minutes 2]

For each N in ``--tables``: N log tables at freshness F (``--freshness``
seconds) are created through the gateway; a feeder appends one row to each
table every F/2 (through the gateway, spread over the period); after a
warm-up of 2·F, ``lag = now − last_tiered_time`` of every table is sampled
from ``sys.lake_tiering_status`` every 2 s for ``--minutes``, while 8 other
clients read ``sys.lake_tiering_status`` in a loop. Prints p50/p95/max lag,
rounds per minute and the readers' p50/p95, next to the targets (p95 lag ≤
1.5·F; readers p50 ≤ 1 s). The server runs with its default worker settings
(one job, ``tierlake.tiering.tables-per-job``) unless ``--conf k=v`` says
otherwise. Each N's tables are disabled before the next N starts.
"""

from __future__ import annotations

import argparse
import threading
import time
from datetime import datetime, timezone

from bench.common import p, start_server
from bench.gateway_load import run_clients

STATUS = "SELECT table_name, last_tiered_time FROM sys.lake_tiering_status WHERE database_name = '{db}'"


def connect(server):
    from pyhive import hive

    return hive.connect("127.0.0.1", server.gateway.port, username="bench")


class Feeder(threading.Thread):
    """One row into each table every ``period`` seconds, spread over the period."""

    def __init__(self, server, tables: list[str], period: float):
        super().__init__(daemon=True)
        self.server, self.tables, self.period = server, tables, period
        self.stop_event = threading.Event()
        self.appends, self.late = 0, 0

    def run(self) -> None:
        cursor = connect(self.server).cursor()
        step = self.period / len(self.tables)
        n, start = 0, time.monotonic()
        while not self.stop_event.is_set():
            table = self.tables[n % len(self.tables)]
            cursor.execute(f"INSERT INTO {table} VALUES ({n})")
            self.appends += 1
            n += 1
            wait = start + n * step - time.monotonic()
            if wait > 0:
                self.stop_event.wait(wait)
            else:
                self.late += 1

    def stop(self) -> None:
        self.stop_event.set()


def one_size(server, n: int, freshness: float, minutes: float) -> dict:
    db = f"many_{n}_{int(time.time())}"
    cursor = connect(server).cursor()
    cursor.execute(f"CREATE DATABASE {db}")
    tables = [f"{db}.t{i}" for i in range(n)]
    started = time.monotonic()
    for i, table in enumerate(tables):
        cursor.execute(f"CREATE TABLE {table} (id BIGINT) TBLPROPERTIES "
                       f"('table.datalake.enabled'='true', 'table.datalake.freshness'='{freshness:g} s')")
        if (i + 1) % 10 == 0 or i + 1 == n:
            print(f"  created {i + 1}/{n} tables ({time.monotonic() - started:.0f} s)", flush=True)
    rounds_before = sum(w.rounds for w in server.workers)
    # Two feeders: one INSERT is a commit (~0.1-0.2 s); one alone could not keep up with 100 tables.
    half = (len(tables) + 1) // 2
    feeders = [Feeder(server, part, freshness / 2) for part in (tables[:half], tables[half:]) if part]
    for f in feeders:
        f.start()
    time.sleep(2 * freshness)
    lags: list[float] = []
    readers = {}

    def read_status():
        clients = 8
        statements = max(1, int(minutes * 60 / 0.5 / clients))
        readers["result"] = run_clients(lambda _n: connect(server), clients, statements,
                                        ("SELECT * FROM sys.lake_tiering_status",))

    reader_thread = threading.Thread(target=read_status, daemon=True)
    reader_thread.start()
    t0 = time.monotonic()
    rounds_start = sum(w.rounds for w in server.workers)
    while time.monotonic() - t0 < minutes * 60:
        cursor.execute(STATUS.format(db=db))
        now = datetime.now(timezone.utc)
        for _name, last in cursor.fetchall():
            if last is None:
                lags.append(float("inf"))
                continue
            last = datetime.fromisoformat(str(last)).replace(tzinfo=timezone.utc)
            lags.append((now - last).total_seconds())
        time.sleep(2)
    elapsed = time.monotonic() - t0
    rounds = sum(w.rounds for w in server.workers) - rounds_start
    for f in feeders:
        f.stop()
    for f in feeders:
        f.join(60)
    reader_thread.join(600)
    for table in tables:
        cursor.execute(f"CALL sys.disable_tiering('{table}')")
        cursor.fetchall()
    result = readers.get("result")
    return {
        "n": n, "samples": len(lags), "p50": p(lags, 0.5), "p95": p(lags, 0.95), "max": max(lags),
        "rounds_per_min": rounds / elapsed * 60, "rounds_total": sum(w.rounds for w in server.workers) - rounds_before,
        "appends": sum(f.appends for f in feeders), "feeder_late": sum(f.late for f in feeders),
        "most_at_once": max((w.most_at_once for w in server.workers), default=0),
        "readers_p50": result.percentile(0.5) if result else float("nan"),
        "readers_p95": result.percentile(0.95) if result else float("nan"),
        "readers_failed": len(result.failures) if result else -1,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", default="20,50,100")
    parser.add_argument("--freshness", type=float, default=10.0)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--conf", action="append", default=[], help="server setting k=v (default: none)")
    args = parser.parse_args()
    conf = dict(c.split("=", 1) for c in args.conf)
    # The default server: tierlake.tiering.workers and tables-per-job as shipped.
    server = start_server(**conf)
    print(f"server: workers {len(server.workers)}, tables per job "
          f"{server.config.int('tierlake.tiering.tables-per-job')}", flush=True)
    f = args.freshness
    rows = []
    try:
        for n in (int(x) for x in args.tables.split(",")):
            print(f"N = {n}", flush=True)
            r = one_size(server, n, f, args.minutes)
            rows.append(r)
            print(f"  {r}", flush=True)
    finally:
        server.stop()
    print()
    print(f"| tables | lag p50 | lag p95 (target ≤ {1.5 * f:g} s) | lag max | rounds/min | most rounds at once "
          f"| status readers p50 / p95 (target p50 ≤ 1 s) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ok = "✓" if r["p95"] <= 1.5 * f else "✗"
        print(f"| {r['n']} | {r['p50']:.1f} s | {r['p95']:.1f} s {ok} | {r['max']:.1f} s | {r['rounds_per_min']:.0f} "
              f"| {r['most_at_once']} | {r['readers_p50'] * 1000:.0f} / {r['readers_p95'] * 1000:.0f} ms "
              f"({r['readers_failed']} failed) |")


if __name__ == "__main__":
    main()
