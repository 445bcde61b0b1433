"""Many tables, always fresh (issue 18): how many log tables one default
server keeps within their freshness.

    PYTHONPATH=. python -m bench.bench_many_tables [--tables 20,50,100] [--freshness 10] [--minutes 2]

For each N in ``--tables``: N log tables at freshness F (``--freshness``
seconds) are created through the gateway; a feeder appends one row to each
table every F/2 (through the gateway, spread over the period); after a
warm-up of 2·F (``--warmup``: longer), ``lag = now − last_tiered_time`` of every table is sampled
from ``sys.lake_tiering_status`` every 2 s for ``--minutes``, while 8 other
clients read ``sys.lake_tiering_status`` in a loop (a query, 0.5 s, the next
one) for the whole sampling window. The feeders and the readers are Python
processes of their own, as client applications are (``--clients-in-process``:
threads of the server's process, as in the runs before 2026-11-27). Prints
p50/p95/max lag, rounds per minute, late appends, the server's CPU in cores
and, over the sampling window, in ms per tiering round and per acknowledged
append (issue 53: a measure that travels between machines; bench/common.py
``SERVER_CPU_HOW``: its Python process and all its descendants, the JVM
among them, clients excluded; "of which JIT": the JIT compiler threads'
CPU — before 2026-11-28 that column was the compilation MXBean's elapsed
time, now printed beside it), and the readers' p50/p95, next to the
targets (p95 lag ≤ 1.5·F; readers p50 ≤ 1 s). The server runs with its default worker settings
(one job, ``tierlake.tiering.tables-per-job``) unless ``--conf k=v`` says
otherwise. Each N's tables are disabled before the next N starts.
"""

from __future__ import annotations

import argparse
import threading
import time
from datetime import datetime, timezone

from bench.common import (
    SERVER_CPU_HOW,
    ServerCpu,
    acknowledged_inserts,
    gateway_statements,
    p,
    ps_cpu_seconds,
    start_server,
)
from bench.gateway_load import run_clients, run_clients_out_of_process

STATUS = "SELECT table_name, last_tiered_time FROM sys.lake_tiering_status WHERE database_name = '{db}'"


def connect(server):
    from pyhive import hive

    return hive.connect("127.0.0.1", server.gateway.port, username="bench")


class Feeder(threading.Thread):
    """One row into each table every ``period`` seconds, spread over the period."""

    def __init__(self, port: int, tables: list[str], period: float):
        super().__init__(daemon=True)
        self.port, self.tables, self.period = port, tables, period
        self.stop_event = threading.Event()
        self.appends, self.late = 0, 0

    def run(self) -> None:
        from pyhive import hive

        cursor = hive.connect("127.0.0.1", self.port, username="bench").cursor()
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


def _feeder_process(port: int, tables: list[str], period: float, stop, out) -> None:
    feeder = Feeder(port, tables, period)
    feeder.start()
    stop.wait()
    feeder.stop()
    feeder.join(60)
    out.put((feeder.appends, feeder.late))


class FeederProcess:
    """A :class:`Feeder` in a Python process of its own, as a client application is:
    its Thrift calls do not share the server's GIL."""

    def __init__(self, port: int, tables: list[str], period: float):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs a JVM bridge
        self.stop_event, self.out = ctx.Event(), ctx.Queue()
        self.process = ctx.Process(target=_feeder_process, args=(port, tables, period, self.stop_event, self.out),
                                   daemon=True)
        self.appends, self.late = 0, 0

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.stop_event.set()

    def join(self, timeout: float) -> None:
        self.appends, self.late = self.out.get(timeout=timeout)
        self.process.join(timeout)


def jit_seconds(server) -> float:
    """Seconds the JVM's JIT compilers have spent so far (all compiler threads): the compilation MXBean's
    elapsed time, not CPU time (on a loaded machine it exceeds the compiler threads' CPU; the table's
    "of which JIT" is their CPU, bench/common.py)."""
    jvm = server.spark.sparkContext._jvm
    return jvm.java.lang.management.ManagementFactory.getCompilationMXBean().getTotalCompilationTime() / 1000


def jvm_uptime(server) -> float:
    jvm = server.spark.sparkContext._jvm
    return jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getUptime() / 1000


def one_size(server, n: int, freshness: float, minutes: float, in_process: bool = False,
             warmup: float = 0.0, cpu_check: bool = False) -> dict:
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
    kind = Feeder if in_process else FeederProcess
    feeders = [kind(server.gateway.port, part, freshness / 2) for part in (tables[:half], tables[half:]) if part]
    for f in feeders:
        f.start()
    time.sleep(max(2 * freshness, warmup * 60))
    lags: list[float] = []
    readers = {}

    def read_status():
        # Each reader queries, waits 0.5 s (a dashboard's refresh), and goes on for the whole sampling window.
        clients, pause, seconds = 8, 0.5, minutes * 60
        statements = 1_000_000
        query = ("SELECT * FROM sys.lake_tiering_status",)
        if in_process:
            readers["result"] = run_clients(lambda _n: connect(server), clients, int(seconds / pause), query)
        else:
            spec = {"host": "127.0.0.1", "port": server.gateway.port, "user": "reader"}
            readers["result"] = run_clients_out_of_process(spec, clients, statements, query, processes=2,
                                                           pause=pause, seconds=seconds)

    reader_thread = threading.Thread(target=read_status, daemon=True)
    reader_thread.start()
    t0 = time.monotonic()
    cpu = ServerCpu()
    cpu0, jit0, uptime = cpu.read(), jit_seconds(server), jvm_uptime(server)
    ps0 = ps_cpu_seconds(cpu0.server_pids) if cpu_check else {}
    rounds_start = sum(w.rounds for w in server.workers)
    acked0, answered0 = acknowledged_inserts(), gateway_statements()
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
    cpu1 = cpu.read()
    ps1 = ps_cpu_seconds(cpu1.server_pids) if cpu_check else {}
    rounds = sum(w.rounds for w in server.workers) - rounds_start
    acked, answered = acknowledged_inserts() - acked0, gateway_statements() - answered0
    elapsed = cpu1.at - cpu0.at
    server_s = cpu.seconds(cpu0, cpu1)
    jit = jit_seconds(server) - jit0
    if cpu_check:
        print(f"  cpu check: /proc server CPU {server_s:.2f} s (own utime+stime "
              f"{(cpu1.own_ticks - cpu0.own_ticks) / cpu.tick:.2f} s) against `ps -o cputime` of the same pids "
              f"{sum(ps1.values()) - sum(ps0.values())} s (whole seconds per process) over {elapsed:.1f} s; server "
              f"processes {cpu1.describe(cpu1.server_pids)}; client processes excluded "
              f"{cpu1.describe(cpu1.client_pids)}", flush=True)
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
        "rounds_per_min": rounds / elapsed * 60, "server_cores": server_s / elapsed,
        "jit_cores": cpu.jit_seconds(cpu0, cpu1) / elapsed,
        "jit_compile_cores": jit / elapsed,
        "server_cpu_s": server_s, "window_s": elapsed, "rounds": rounds, "acked": acked, "answered": answered,
        "cpu_ms_round": server_s * 1000 / rounds if rounds else float("nan"),
        "jit_ms_round": cpu.jit_seconds(cpu0, cpu1) * 1000 / rounds if rounds else float("nan"),
        "cpu_ms_acked": server_s * 1000 / acked if acked else float("nan"),
        "jvm_minutes": uptime / 60,
        "rounds_total": sum(w.rounds for w in server.workers) - rounds_before,
        "reads": result.statements if result else 0,
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
    parser.add_argument("--clients-in-process", action="store_true",
                        help="feeders and readers as threads of the server's process (the runs before 2026-11-27)")
    parser.add_argument("--warmup", type=float, default=0.0,
                        help="minutes each N runs its full load before sampling (default: 2·F); the JIT of a "
                             "new server compiles for minutes, a server that has run a while does not")
    parser.add_argument("--conf", action="append", default=[], help="server setting k=v (default: none)")
    parser.add_argument("--cpu-check", action="store_true",
                        help="cross-check the server CPU against `ps -o cputime` of the same processes")
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
            r = one_size(server, n, f, args.minutes, args.clients_in_process, args.warmup, args.cpu_check)
            rows.append(r)
            print(f"  {r}", flush=True)
    finally:
        server.stop()
    print()
    print(f"Sampling window per N: {SERVER_CPU_HOW} CPU ms/round = server CPU / tiering rounds finished in the "
          "window; ms/append = the same total / INSERTs acknowledged in the window (the server's "
          "tierlake_ingest_acknowledged); both include serving the feeders, the status readers and the lag "
          "sampling (statements answered: the gateway's count in the window); nothing is split out.")
    print()
    print(f"| tables | lag p50 | lag p95 (target ≤ {1.5 * f:g} s) | lag max | rounds/min | most rounds at once "
          f"| feeder late | server CPU (cores) | of which JIT | JIT compile time (cores, elapsed) | JVM up at sampling "
          f"| status reads: count, p50 / p95 (target p50 ≤ 1 s) | rounds | server CPU ms/round | of which JIT "
          f"| appends acked | server CPU ms/append | statements answered | sampling window |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ok = "✓" if r["p95"] <= 1.5 * f else "✗"
        print(f"| {r['n']} | {r['p50']:.1f} s | {r['p95']:.1f} s {ok} | {r['max']:.1f} s | {r['rounds_per_min']:.0f} "
              f"| {r['most_at_once']} | {r['feeder_late']} of {r['appends']} | {r['server_cores']:.2f} "
              f"| {r['jit_cores']:.2f} | {r['jit_compile_cores']:.2f} | {r['jvm_minutes']:.0f} min "
              f"| {r['reads']}, {r['readers_p50'] * 1000:.0f} / {r['readers_p95'] * 1000:.0f} ms "
              f"({r['readers_failed']} failed) | {r['rounds']} | {r['cpu_ms_round']:.0f} | {r['jit_ms_round']:.0f} "
              f"| {r['acked']:.0f} "
              f"| {r['cpu_ms_acked']:.0f} | {r['answered']:.0f} | {r['window_s']:.0f} s |")


if __name__ == "__main__":
    main()
