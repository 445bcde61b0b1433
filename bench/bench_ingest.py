"""Concurrent ingest into stream tables (docs/ingest.md), against plain Spark SQL.

Writers run in their own processes (spawned; each a PyHive connection to the
gateway) and send ``INSERT … VALUES`` statements of N rows as fast as they
are acknowledged, for a fixed time, while tiering runs at a 2 s freshness.
Each configuration runs twice in the same server: into tiered stream tables
(tierlake's write path) and into plain Iceberg tables of the same columns
(relayed to Spark's Thrift Server: the raw path). Printed per line:
acknowledged statements/s, rows/s, p50/p99 acknowledgement latency, failures
(with the first error), the tierlake/raw ratio of statements/s, and the
server's CPU time over the measured window (issue 53: a measure that travels
between machines; bench/common.py ``SERVER_CPU_HOW`` says how it is read)
per acknowledged statement and per tiering round, with the raw/tierlake
ratio of CPU per statement, the server's cores used and the writers' own CPU
per statement (their processes, not counted in the server's).

Then one ``INSERT … SELECT`` of ``--bulk-rows`` rows into a stream table
against the same statement into a plain Iceberg table (median of 3).

    .venv/bin/python -m bench.bench_ingest                        # the default matrix
    .venv/bin/python -m bench.bench_ingest --writers 16 --rows 20 --tables 1 --kinds log,pk --seconds 20
    .venv/bin/python -m bench.bench_ingest --master standalone ...  # the server on a Spark cluster (bench/common.py)

``--sample-every S`` samples what each stream table keeps while the writers
run (snapshots, live data files, files on disk, metadata size, request-id
ledger rows) and prints the samples and their maxima in the first and the
second half: the 10-minute soak of docs/ingest.md ("Limits and costs").
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import threading
import time
import uuid

from bench.common import SERVER_CPU_HOW, ServerCpu, add_master_argument, p, ps_cpu_seconds, spark_master, start_server


def _writer(port: int, tables: list[str], pk: bool, rows: int, seconds: float, seed: int, start_at: float,
            out, request_ids: bool = False) -> None:
    from pyhive import hive

    rnd = random.Random(seed)
    conn = hive.connect("127.0.0.1", port, username="bench")
    cur = conn.cursor()
    latencies, failures, first_error, sent = [], 0, None, 0
    while time.time() < start_at:
        time.sleep(0.01)
    deadline = start_at + seconds
    n = 0
    while time.time() < deadline:
        table = tables[n % len(tables)]
        n += 1
        if pk:
            # Distinct keys: different changes to one key in one statement are refused (nothing orders them).
            values = ", ".join(f"({key}, {rnd.random():.4f}, 'v{seed}', '+U')"
                               for key in rnd.sample(range(1_000_000), rows))
            statement = f"INSERT INTO {table} (id, amount, tag, _change_type) VALUES {values}"
        else:
            values = ", ".join(f"({rnd.randrange(1_000_000)}, {rnd.random():.4f}, 'v{seed}')" for _ in range(rows))
            statement = f"INSERT INTO {table} (id, amount, tag) VALUES {values}"
        started = time.perf_counter()
        sent += 1
        try:
            if request_ids:  # an idempotent producer: every write tagged (one more round trip)
                cur.execute(f"SET `tierlake.write.request-id`=w{seed}-{n}")
            cur.execute(statement)
            latencies.append(time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 - counted, the first one reported
            failures += 1
            first_error = first_error or str(e)[:300]
    conn.close()
    # This client's own CPU (its whole life): reported beside the server's, never part of it.
    out.put((latencies, failures, first_error, sent, time.process_time()))


def _make_tables(cursor, db: str, count: int, pk: bool, tiered: bool) -> list[str]:
    names = []
    for i in range(count):
        name = f"{db}.{'pk' if pk else 'log'}_{'t' if tiered else 'raw'}_{i}"
        if tiered:
            props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='2 s'"
            if pk:
                props += ", 'primary-key'='id', 'bucket.num'='4'"
            cursor.execute(f"CREATE TABLE {name} (id BIGINT, amount DOUBLE, tag STRING) TBLPROPERTIES ({props})")
        else:
            extra = ", _change_type STRING" if pk else ""
            cursor.execute(f"CREATE TABLE {name} (id BIGINT, amount DOUBLE, tag STRING{extra}) USING iceberg")
        names.append(name)
    return names


def run_config(port: int, tables: list[str], pk: bool, writers: int, rows: int, seconds: float,
               request_ids: bool = False, sampler: Sampler | None = None, server=None,
               cpu_check: bool = False) -> dict:
    """``server``: measure its CPU (bench/common.py ``SERVER_CPU_HOW``) and its tiering rounds over the
    window from the moment the writers may send (``start_at``) to the moment the last writer has
    reported (every acknowledged statement done; no statement is sent after ``seconds``)."""
    ctx = multiprocessing.get_context("spawn")  # never fork a process that runs a JVM bridge
    out = ctx.Queue()
    start_at = time.time() + 3.0 + writers * 0.05  # every writer connected before the clock starts
    procs = [ctx.Process(target=_writer, args=(port, tables[i % len(tables):] + tables[:i % len(tables)], pk, rows,
                                               seconds, i, start_at, out, request_ids), daemon=True)
             for i in range(writers)]
    for proc in procs:
        proc.start()
    if sampler is not None:
        sampler.start(start_at)
    cpu = ServerCpu() if server is not None else None
    ingest0 = _ingest_counters(server)
    try:
        if cpu is not None:
            late = time.time() - start_at
            time.sleep(max(0.0, -late))
            cpu0, rounds0 = cpu.read(), _rounds(server)
            ps0 = ps_cpu_seconds(cpu0.server_pids) if cpu_check else {}
        results = [out.get(timeout=seconds + 300) for _ in procs]
        if cpu is not None:
            cpu1, rounds1 = cpu.read(), _rounds(server)
            ps1 = ps_cpu_seconds(cpu1.server_pids) if cpu_check else {}
    finally:
        if sampler is not None:
            sampler.stop()
    for proc in procs:
        proc.join(timeout=30)
    latencies = [x for r in results for x in r[0]]
    failures = sum(r[1] for r in results)
    errors = [r[2] for r in results if r[2]]
    measured = {
        "acked": len(latencies), "failures": failures, "first_error": errors[0] if errors else None,
        "statements_s": len(latencies) / seconds, "rows_s": len(latencies) * rows / seconds,
        "p50": p(latencies, 0.5) if latencies else float("nan"),
        "p99": p(latencies, 0.99) if latencies else float("nan"),
    }
    ingest1 = _ingest_counters(server)
    if ingest0 and ingest1:
        d = {k: ingest1[k] - ingest0[k] for k in ingest0}
        staged = d["templateHits"] + d["templateMisses"]

        def per(key: str) -> float:
            return d[key] / max(1, d["groups"])

        measured["templates"] = (f"statements staged from a kept template: {d['templateHits']} of {staged} "
                                 f"(misses: table changed {d['templateStaleTable']}, session changed "
                                 f"{d['templateStaleSession']}; templates kept {d['templatesKept']}, "
                                 f"refused {d['templatesRefused']}); {d['groups']} group commits, their time under "
                                 f"the table's lock per group: data files {per('groupMsFiles'):.1f} ms, manifests "
                                 f"{per('groupMsManifests'):.1f} ms, metadata commit {per('groupMsCommit'):.1f} ms, "
                                 f"read back {per('groupMsRefresh'):.1f} ms; metadata files not parsed again "
                                 f"{d['metadataReused']}")
    if cpu is not None:
        window = cpu1.at - cpu0.at
        server_s = cpu.seconds(cpu0, cpu1)
        measured.update({
            "window_s": window, "server_cpu_s": server_s, "server_cores": server_s / window,
            "cpu_ms_stmt": server_s * 1000 / len(latencies) if latencies else float("nan"),
            "jit_ms_stmt": cpu.jit_seconds(cpu0, cpu1) * 1000 / len(latencies) if latencies else float("nan"),
            "rounds": rounds1 - rounds0,
            "cpu_ms_round": server_s * 1000 / (rounds1 - rounds0) if rounds1 > rounds0 else float("nan"),
            "clients_cpu_s": sum(r[4] for r in results), "late_start_s": max(0.0, late),
        })
        if cpu_check:
            after_join = cpu.read()  # the writers are joined: their CPU is now the bench process's cutime
            reaped = (after_join.own_children_ticks - cpu0.own_children_ticks) / cpu.tick
            common = [pid for pid in cpu1.server_pids if pid in ps0 or pid in ps1]
            measured["cpu_check"] = (
                f"cpu check: /proc server CPU {server_s:.2f} s (own utime+stime "
                f"{(cpu1.own_ticks - cpu0.own_ticks) / cpu.tick:.2f} s) against `ps -o cputime` of the same "
                f"pids {sum(ps1.values()) - sum(ps0.values())} s (whole seconds per process) over "
                f"{window:.1f} s; server processes {cpu1.describe(common)}; client processes excluded at the end "
                f"{cpu1.describe(cpu1.client_pids)}; "
                f"the writers' own CPU {measured['clients_cpu_s']:.2f} s (their process_time), reaped into "
                f"the bench process's cutime (not counted) {reaped:.2f} s")
    return measured


def _ingest_counters(server) -> dict | None:
    """StreamIngest's counters (statements, templates) in the server's JVM, or None without a server."""
    if server is None:
        return None
    from tierlake.server.ingest.writer import StreamWriter  # import here: the bench's server process only

    return StreamWriter().counters()


def _rounds(server) -> int:
    return sum(w.rounds for w in server.workers)


class Sampler:
    """What the stream tables keep while writers run: every ``every`` seconds,
    per table, its snapshots, live data files, files on disk (data and
    metadata) and metadata.json size, and the rows of ``sys.write_requests``;
    measured in the bench process (the server's), off the writers' clock."""

    def __init__(self, server, tables: list[str], every: float):
        self.server, self.tables, self.every = server, tables, every
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, start_at: float) -> None:
        self._start_at = start_at
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        time.sleep(max(0.0, self._start_at - time.time()))
        while True:
            try:
                self.samples.append(self.sample())
            except Exception as e:  # noqa: BLE001 - a failed sample is reported, not fatal
                print(f"  sample failed: {e}", flush=True)
            if self._stop.wait(self.every):
                return

    def sample(self) -> dict:
        from tierlake.server.runtime.iceberg_actions import data_file_counts, snapshot_count
        from tierlake.server.runtime.session import iceberg_table

        spark = self.server.spark
        row = {"t": time.time() - self._start_at, "snapshots": 0, "data_files": 0, "disk_files": 0,
               "metadata_kb": 0.0}
        for name in self.tables:
            table = iceberg_table(spark, name)
            row["snapshots"] += snapshot_count(table)
            row["data_files"] += data_file_counts(table)[0]
            location = str(table.location()).removeprefix("file:")
            for _, _, files in os.walk(location):
                row["disk_files"] += sum(1 for f in files if not f.startswith("."))
            for _ in range(5):  # the file may be replaced (and the old one deleted) between the two reads
                table.refresh()
                current = str(table.operations().current().metadataFileLocation()).removeprefix("file:")
                try:
                    row["metadata_kb"] += os.path.getsize(current) / 1024
                    break
                except FileNotFoundError:
                    continue
        row["ledger_rows"] = spark.sql("SELECT count(*) FROM sys.write_requests").first()[0]
        return row

    def report(self) -> None:
        keys = ("snapshots", "data_files", "disk_files", "metadata_kb", "ledger_rows")
        print("\n| t (s) | stream snapshots | live data files | files on disk | metadata.json KiB | "
              "sys.write_requests rows |")
        print("|---|---|---|---|---|---|")
        for r in self.samples:
            print(f"| {r['t']:.0f} | {r['snapshots']} | {r['data_files']} | {r['disk_files']} | "
                  f"{r['metadata_kb']:.0f} | {r['ledger_rows']} |")
        if len(self.samples) >= 4:
            half = len(self.samples) // 2
            first, second = self.samples[:half], self.samples[half:]
            print("\nmax in the first half → max in the second half: " + ", ".join(
                f"{k} {max(r[k] for r in first):.0f} → {max(r[k] for r in second):.0f}" for k in keys), flush=True)


def bulk(server, cursor, db: str, rows: int, runs: int) -> tuple[list[float], list[float]]:
    spark = server.spark
    spark.range(rows).selectExpr("id", "rand() AS amount", "'bulk' AS tag").write.format("iceberg").saveAsTable(
        f"{db}.bulk_source")
    tiered = _make_tables(cursor, db + "_bulk", 1, False, True)[0]
    raw = _make_tables(cursor, db + "_bulk", 1, False, False)[0]
    mine, theirs = [], []
    for _ in range(runs):
        for target, out in ((raw, theirs), (tiered, mine)):
            started = time.perf_counter()
            cursor.execute(f"INSERT INTO {target} SELECT id, amount, tag FROM {db}.bulk_source")
            out.append(time.perf_counter() - started)
    return mine, theirs


def warm(cursor, port: int, seconds: float) -> None:
    """Unmeasured load on both paths: log and primary key, 16 writers of 20 rows."""
    cursor.execute("CREATE DATABASE ingest_warmup")
    for pk in (False, True):
        for tiered in (True, False):
            tables = _make_tables(cursor, "ingest_warmup", 1, pk, tiered)
            run_config(port, tables, pk, 16, 20, seconds / 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", default="1,16,64", help="writer processes per configuration")
    parser.add_argument("--rows", default="1,20,1000", help="rows per INSERT … VALUES")
    parser.add_argument("--tables", default="1,8", help="tables the writers share")
    parser.add_argument("--kinds", default="log,pk", help="log and/or pk (primary key)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per configuration and path")
    parser.add_argument("--bulk-rows", type=int, default=1_000_000, help="rows of the INSERT … SELECT (0: skip)")
    parser.add_argument("--bulk-runs", type=int, default=3)
    parser.add_argument("--no-raw", action="store_true", help="skip the plain-Spark baseline")
    parser.add_argument("--request-ids", action="store_true",
                        help="tag every write with a tierlake.write.request-id (a SET before each INSERT)")
    parser.add_argument("--sample-every", type=float, default=0.0,
                        help="seconds between samples of the stream tables' snapshots and files (0: none)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a server setting (repeatable), e.g. tierlake.write.request-id-retention=2min")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="seconds of unmeasured 16-writer load first: a new JVM's JIT takes a core for minutes")
    parser.add_argument("--cpu-check", action="store_true",
                        help="cross-check each line's server CPU against `ps -o cputime` of the same processes, "
                             "and print the writers' own CPU (not counted)")
    add_master_argument(parser)
    args = parser.parse_args()
    with spark_master(args.master) as on_master:
        settings = {"tierlake.tiering.workers": "1", **on_master}
        settings.update(dict(item.split("=", 1) for item in args.set))
        run(args, settings)


def run(args: argparse.Namespace, settings: dict[str, str]) -> None:
    from pyhive import hive

    server = start_server(**settings)
    print(f"Spark master {server.spark.sparkContext.master}", flush=True)
    try:
        port = server.gateway.port
        cursor = hive.connect("127.0.0.1", port, username="bench").cursor()
        if args.warmup > 0:
            warm(cursor, port, args.warmup)
        print(f"Measured window per line: from the writers' start to the last writer's report; {SERVER_CPU_HOW} "
              "CPU ms/stmt = server CPU / acknowledged statements; ms/round = server CPU / tiering rounds "
              "finished in the window (the same total: the rounds' share is not split out); cores = server "
              "CPU / window. Clients' own CPU is printed apart.", flush=True)
        print("| kind | writers | rows/stmt | tables | path | acked stmts/s | rows/s | p50 | p99 | failures | ratio "
              "| server CPU ms/stmt | of which JIT | CPU ratio raw/tierlake | rounds | server CPU ms/round "
              "| server cores | clients' CPU ms/stmt |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
        for kind in args.kinds.split(","):
            pk = kind == "pk"
            for n_tables in [int(x) for x in args.tables.split(",")]:
                for writers in [int(x) for x in args.writers.split(",")]:
                    for rows in [int(x) for x in args.rows.split(",")]:
                        db = "ingest_" + uuid.uuid4().hex[:6]
                        cursor.execute(f"CREATE DATABASE {db}")
                        measured = {}
                        paths = ("tierlake",) if args.no_raw else ("raw", "tierlake")
                        for path in paths:
                            tables = _make_tables(cursor, db, n_tables, pk, path == "tierlake")
                            sampler = None
                            if args.sample_every > 0 and path == "tierlake":
                                sampler = Sampler(server, tables, args.sample_every)
                            measured[path] = r = run_config(port, tables, pk, writers, rows, args.seconds,
                                                            args.request_ids and path == "tierlake", sampler,
                                                            server=server, cpu_check=args.cpu_check)
                            ratio, cpu_ratio = "", ""
                            if path == "tierlake" and "raw" in measured and measured["raw"]["statements_s"]:
                                ratio = f"{r['statements_s'] / measured['raw']['statements_s']:.2f}×"
                                if r["acked"] and measured["raw"]["acked"]:
                                    cpu_ratio = f"{measured['raw']['cpu_ms_stmt'] / r['cpu_ms_stmt']:.2f}×"
                            clients = r["clients_cpu_s"] * 1000 / r["acked"] if r["acked"] else float("nan")
                            print(f"| {kind} | {writers} | {rows} | {n_tables} | {path} | {r['statements_s']:.1f} | "
                                  f"{r['rows_s']:.0f} | {r['p50'] * 1000:.0f} ms | {r['p99'] * 1000:.0f} ms | "
                                  f"{r['failures']} | {ratio} | {r['cpu_ms_stmt']:.1f} | {r['jit_ms_stmt']:.1f} "
                                  f"| {cpu_ratio} | {r['rounds']} | {r['cpu_ms_round']:.0f} | {r['server_cores']:.2f} "
                                  f"| {clients:.1f} |", flush=True)
                            if r["late_start_s"] > 0.05:
                                print(f"  the window started {r['late_start_s']:.2f} s after the writers' start "
                                      "(the bench process was late)", flush=True)
                            if r.get("cpu_check"):
                                print(f"  {r['cpu_check']}", flush=True)
                            if path == "tierlake" and r.get("templates"):
                                print(f"  {r['templates']}", flush=True)
                            if r["first_error"]:
                                print(f"  first error: {r['first_error']}", flush=True)
                            if sampler is not None:
                                sampler.report()
        if args.bulk_rows:
            db = "ingest_" + uuid.uuid4().hex[:6]
            cursor.execute(f"CREATE DATABASE {db}")
            cursor.execute(f"CREATE DATABASE {db}_bulk")
            mine, theirs = bulk(server, cursor, db, args.bulk_rows, args.bulk_runs)
            print(f"\nINSERT … SELECT of {args.bulk_rows} rows, median of {args.bulk_runs}: stream table "
                  f"{statistics.median(mine):.2f} s, plain Iceberg {statistics.median(theirs):.2f} s, "
                  f"throughput ratio {statistics.median(theirs) / statistics.median(mine):.2f}×")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
