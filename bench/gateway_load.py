"""Concurrent JDBC clients on the sys status views while tables are tiered.

    PYTHONPATH=. python -m bench.gateway_load [--clients 32] [--statements 20] [--tables 4] [--auth]
    PYTHONPATH=. python -m bench.gateway_load --status [--processes 4]   # status reads (issue 19)

Starts a server with two in-process tiering workers, creates ``--tables``
tiered log tables (freshness 1 s) fed by a background appender, and runs
``--clients`` PyHive connections, each issuing ``--statements`` queries that
alternate between ``sys.lake_tiering_status`` and ``sys.tiering_rounds``.
Prints statements/s and p50/p99 latency; ``--auth`` does the same with a
password file (every statement classified for its role). The load test
(tests/load) drives the same functions with fewer statements and asserts
only that none failed.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field

QUERIES = (
    "SELECT database_name, table_name, status, tiering_epoch, last_tiered_time FROM sys.lake_tiering_status",
    "SELECT database_name, table_name, outcome, rows FROM sys.tiering_rounds ORDER BY started_at DESC LIMIT 20",
)


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def statements(self) -> int:
        return len(self.latencies)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")

    def summary(self) -> str:
        return (f"{self.statements} statements, {len(self.failures)} failed, {self.elapsed:.1f} s: "
                f"{self.statements / self.elapsed:.1f} statements/s, p50 {self.percentile(0.5) * 1000:.0f} ms, "
                f"p99 {self.percentile(0.99) * 1000:.0f} ms")


def _statements(cursor, n: int, statements: int, queries: tuple[str, ...], result: LoadResult,
                lock: threading.Lock, pause: float = 0.0, deadline: float | None = None) -> None:
    """Client ``n``'s statements, each timed; failures are counted, not raised.
    With ``deadline`` (wall-clock seconds), it stops there even before ``statements``;
    ``pause`` is a wait between statements (a dashboard's refresh)."""
    for i in range(statements):
        if deadline is not None and time.time() >= deadline:
            break
        if i and pause:
            time.sleep(pause)
        t = time.perf_counter()
        try:
            cursor.execute(queries[(n + i) % len(queries)])
            cursor.fetchall()
        except Exception as e:  # noqa: BLE001 - every failure is counted
            with lock:
                result.failures.append(f"client {n} statement {i}: {type(e).__name__}: {e}")
            continue
        with lock:
            result.latencies.append(time.perf_counter() - t)


def run_clients(connect, clients: int, statements: int, queries: tuple[str, ...] = QUERIES) -> LoadResult:
    """``clients`` threads, each its own ``connect()``ion, ``statements`` queries each."""
    result = LoadResult()
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(n: int) -> None:
        try:
            conn = connect(n)
            cursor = conn.cursor()
        except Exception as e:  # noqa: BLE001 - every failure is counted
            with lock:
                result.failures.append(f"client {n} connect: {type(e).__name__}: {e}")
            start.abort()
            return
        try:
            start.wait(120)
        except threading.BrokenBarrierError:
            pass
        _statements(cursor, n, statements, queries, result, lock)
        conn.close()

    threads = [threading.Thread(target=client, args=(n,), name=f"load-client-{n}") for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.elapsed = time.perf_counter() - started
    return result


def _connect_spec(spec: dict, n: int):
    from pyhive import hive

    user = spec.get("user") or f"client{n}"
    return hive.connect(spec["host"], spec["port"], username=user, password=spec.get("password"),
                        auth=spec.get("auth", "NONE"))


def _client_process(spec: dict, clients: int, statements: int, queries: tuple[str, ...], ready, out,
                    pause: float = 0.0, seconds: float | None = None) -> None:
    # One process of several: its threads connect, wait for the parent's start, run, and send back.
    result = LoadResult()
    conns = []
    for n in range(clients):
        try:
            conns.append(_connect_spec(spec, n))
        except Exception as e:  # noqa: BLE001 - every failure is counted
            result.failures.append(f"connect: {type(e).__name__}: {e}")
    lock = threading.Lock()

    ready.wait(300)
    deadline = None if seconds is None else time.time() + seconds
    threads = [threading.Thread(target=_statements,
                                args=(c.cursor(), n, statements, queries, result, lock, pause, deadline))
               for n, c in enumerate(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    out.put((result.latencies, result.failures))


def run_clients_out_of_process(spec: dict, clients: int, statements: int, queries: tuple[str, ...] = QUERIES,
                               processes: int = 4, pause: float = 0.0, seconds: float | None = None) -> LoadResult:
    """Like :func:`run_clients`, but the clients live in ``processes`` other
    Python processes (as dashboards do): their Thrift decoding does not share
    the server's GIL. ``spec``: host, port, and optionally user/password/auth.
    ``pause`` waits between a client's statements; ``seconds`` ends them early."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # never fork a process that runs a JVM bridge
    out = ctx.Queue()
    shares = [k for k in (clients // processes + (1 if i < clients % processes else 0)
                          for i in range(processes)) if k]
    ready = ctx.Barrier(len(shares) + 1)
    procs = [ctx.Process(target=_client_process, args=(spec, k, statements, queries, ready, out, pause, seconds))
             for k in shares]
    for p in procs:
        p.start()
    ready.wait(300)
    started = time.perf_counter()
    result = LoadResult()
    for _ in procs:
        latencies, failures = out.get(timeout=1800)
        result.latencies.extend(latencies)
        result.failures.extend(failures)
    result.elapsed = time.perf_counter() - started
    for p in procs:
        p.join(60)
    return result


def create_tiered_tables(cursor, database: str, count: int) -> list[str]:
    cursor.execute(f"CREATE DATABASE IF NOT EXISTS {database}")
    names = []
    for i in range(count):
        name = f"{database}.events{i}"
        cursor.execute(f"CREATE TABLE {name} (id BIGINT, msg STRING) TBLPROPERTIES "
                       "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
        names.append(name)
    return names


class Feeder(threading.Thread):
    """Appends a small batch to every table, over and over, until stopped."""

    def __init__(self, spark, tables: list[str], rows: int = 100):
        super().__init__(daemon=True, name="load-feeder")
        self.spark, self.tables, self.rows = spark, tables, rows
        self.stopping = threading.Event()
        self.batches = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            for table in self.tables:
                self.spark.range(self.rows).selectExpr("id", "'load' AS msg").writeTo(table).append()
            self.batches += 1
            self.stopping.wait(0.5)

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--statements", type=int, default=20)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--auth", action="store_true", help="password file on: every statement is classified")
    parser.add_argument("--status", action="store_true",
                        help="the status-view benchmark: idle, while tiering, and on Spark Thrift Server directly")
    parser.add_argument("--processes", type=int, default=0,
                        help="--status: run the concurrent clients in this many other processes (0: threads here)")
    args = parser.parse_args()
    if args.status:
        status_main(args)
        return

    import tempfile

    from pyhive import hive

    from bench.common import start_server
    from tierlake.server.gateway.auth.passwords import set_user

    conf = {"tierlake.tiering.workers": "2", "tierlake.tiering.poll-interval": "0.2 s",
            "tierlake.coordinator.interval": "1 s"}
    if args.auth:
        path = tempfile.mkdtemp(prefix="tierlake-bench-auth-") + "/passwords"
        set_user(path, "admin", "admin-pw", frozenset({"admin"}))
        set_user(path, "reader", "reader-pw", frozenset({"reader"}))
        conf["tierlake.gateway.password-file"] = path
    server = start_server(**conf)
    port = server.gateway.port

    def connect(n: int, user: str = "reader"):
        if args.auth:
            return hive.connect("127.0.0.1", port, username=user, password=f"{user}-pw", auth="CUSTOM")
        return hive.connect("127.0.0.1", port, username=f"client{n}")

    try:
        admin = connect(0, "admin").cursor()
        tables = create_tiered_tables(admin, "load", args.tables)
        feeder = Feeder(server.spark, tables)
        feeder.start()
        time.sleep(3)  # rounds under way before the clients start
        result = run_clients(connect, args.clients, args.statements)
        feeder.stop()
        admin.execute("SELECT count(*) FROM sys.tiering_rounds WHERE database_name = 'load'")
        rounds = admin.fetchall()[0][0]
        print(f"{args.clients} clients x {args.statements} statements on sys.lake_tiering_status / "
              f"sys.tiering_rounds, {args.tables} tables tiering ({rounds} rounds, {feeder.batches} feeder batches)"
              f"{', password file on' if args.auth else ''}:")
        print(result.summary())
        for failure in result.failures[:10]:
            print("  " + failure)
    finally:
        server.stop()


STATUS_QUERY = ("SELECT * FROM sys.lake_tiering_status",)


def status_main(args) -> None:
    """Status reads as dashboards make them: one client alone, then ``--clients``
    x ``--statements`` of ``SELECT * FROM sys.lake_tiering_status`` with
    tiering idle (tables registered, no worker) and while ``--tables`` tables
    tier (two workers, a feeder), each through the gateway and against the
    internal Spark Thrift Server directly (every query a Spark job)."""
    from pyhive import hive

    from bench.common import start_server
    from tierlake.server.tiering.worker import start_workers

    server = start_server(**{"tierlake.tiering.workers": "0", "tierlake.tiering.poll-interval": "0.2 s",
                             "tierlake.coordinator.interval": "1 s"})
    port, sts = server.gateway.port, server.thrift_port

    def gateway(n: int):
        return hive.connect("127.0.0.1", port, username=f"client{n}")

    # The internal server takes only the gateway's login (docs/security.md): the
    # bench, in the server's process, presents the same secret.
    direct_spec = {"host": "127.0.0.1", "port": sts, "user": "bench", "password": server.internal_secret,
                   "auth": "CUSTOM"}
    gateway_spec = {"host": "127.0.0.1", "port": port}

    def direct(n: int):
        return _connect_spec(direct_spec, n)

    def many(spec: dict):
        if args.processes:
            return lambda clients, statements, queries: run_clients_out_of_process(
                spec, clients, statements, queries, args.processes)
        connect = gateway if spec is gateway_spec else direct
        return lambda clients, statements, queries: run_clients(connect, clients, statements, queries)

    rows = []
    try:
        admin = gateway(0).cursor()
        tables = create_tiered_tables(admin, "load", args.tables)
        time.sleep(3)  # the scheduler has moved them to Pending; no worker: nothing changes
        for label, connect, spec in (("gateway", gateway, gateway_spec),
                                     ("Spark Thrift Server directly", direct, direct_spec)):
            rows.append((f"1 client x 50, idle, {label}", run_clients(connect, 1, 50, STATUS_QUERY)))
            rows.append((f"{args.clients} clients x {args.statements}, idle, {label}",
                         many(spec)(args.clients, args.statements, STATUS_QUERY)))
        feeder = Feeder(server.spark, tables)
        feeder.start()
        workers = start_workers(server, 2)
        time.sleep(5)  # rounds under way before the clients start
        for label, spec in (("gateway", gateway_spec), ("Spark Thrift Server directly", direct_spec)):
            rows.append((f"{args.clients} clients x {args.statements}, {args.tables} tables tiering, {label}",
                         many(spec)(args.clients, args.statements, STATUS_QUERY)))
        feeder.stop()
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.join(timeout=120)
        admin.execute("SELECT count(*) FROM sys.tiering_rounds WHERE database_name = 'load'")
        rounds = admin.fetchall()[0][0]
        handler = server.gateway.handler.by_name["sys-read"]
        print(f"status reads: {STATUS_QUERY[0]}; {rounds} rounds tiered; "
              f"gateway cache {handler.hits} hits / {handler.misses} Spark queries")
        print("| run | statements | failed | statements/s | p50 | p99 |")
        print("|---|---|---|---|---|---|")
        for label, r in rows:
            print(f"| {label} | {r.statements} | {len(r.failures)} | {r.statements / r.elapsed:.1f} | "
                  f"{r.percentile(0.5) * 1000:.0f} ms | {r.percentile(0.99) * 1000:.0f} ms |")
            for failure in r.failures[:5]:
                print("  " + failure)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
