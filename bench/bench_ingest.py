"""Concurrent ingest into stream tables (docs/ingest.md), against plain Spark SQL.

Writers run in their own processes (spawned; each a PyHive connection to the
gateway) and send ``INSERT … VALUES`` statements of N rows as fast as they
are acknowledged, for a fixed time, while tiering runs at a 2 s freshness.
Each configuration runs twice in the same server: into tiered stream tables
(tierlake's write path) and into plain Iceberg tables of the same columns
(relayed to Spark's Thrift Server: the raw path). Printed per line:
acknowledged statements/s, rows/s, p50/p99 acknowledgement latency, failures
(with the first error), and the tierlake/raw ratio of statements/s.

Then one ``INSERT … SELECT`` of ``--bulk-rows`` rows into a stream table
against the same statement into a plain Iceberg table (median of 3).

    .venv/bin/python -m bench.bench_ingest                        # the default matrix
    .venv/bin/python -m bench.bench_ingest --writers 16 --rows 20 --tables 1 --kinds log,pk --seconds 20
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import time
import uuid

from bench.common import p, start_server


def _writer(port: int, tables: list[str], pk: bool, rows: int, seconds: float, seed: int, start_at: float,
            out) -> None:
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
            values = ", ".join(f"({rnd.randrange(1_000_000)}, {rnd.random():.4f}, 'v{seed}', '+U')"
                               for _ in range(rows))
            statement = f"INSERT INTO {table} (id, amount, tag, _change_type) VALUES {values}"
        else:
            values = ", ".join(f"({rnd.randrange(1_000_000)}, {rnd.random():.4f}, 'v{seed}')" for _ in range(rows))
            statement = f"INSERT INTO {table} (id, amount, tag) VALUES {values}"
        started = time.perf_counter()
        sent += 1
        try:
            cur.execute(statement)
            latencies.append(time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 - counted, the first one reported
            failures += 1
            first_error = first_error or str(e)[:300]
    conn.close()
    out.put((latencies, failures, first_error, sent))


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


def run_config(port: int, tables: list[str], pk: bool, writers: int, rows: int, seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")  # never fork a process that runs a JVM bridge
    out = ctx.Queue()
    start_at = time.time() + 3.0 + writers * 0.05  # every writer connected before the clock starts
    procs = [ctx.Process(target=_writer, args=(port, tables[i % len(tables):] + tables[:i % len(tables)], pk, rows,
                                               seconds, i, start_at, out), daemon=True)
             for i in range(writers)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=seconds + 300) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    latencies = [x for r in results for x in r[0]]
    failures = sum(r[1] for r in results)
    errors = [r[2] for r in results if r[2]]
    return {
        "acked": len(latencies), "failures": failures, "first_error": errors[0] if errors else None,
        "statements_s": len(latencies) / seconds, "rows_s": len(latencies) * rows / seconds,
        "p50": p(latencies, 0.5) if latencies else float("nan"),
        "p99": p(latencies, 0.99) if latencies else float("nan"),
    }


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
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="seconds of unmeasured 16-writer load first: a new JVM's JIT takes a core for minutes")
    args = parser.parse_args()
    from pyhive import hive

    server = start_server(**{"tierlake.tiering.workers": "1"})
    try:
        port = server.gateway.port
        cursor = hive.connect("127.0.0.1", port, username="bench").cursor()
        if args.warmup > 0:
            warm(cursor, port, args.warmup)
        print("| kind | writers | rows/stmt | tables | path | acked stmts/s | rows/s | p50 | p99 | failures | ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
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
                            measured[path] = r = run_config(port, tables, pk, writers, rows, args.seconds)
                            ratio = ""
                            if path == "tierlake" and "raw" in measured and measured["raw"]["statements_s"]:
                                ratio = f"{r['statements_s'] / measured['raw']['statements_s']:.2f}×"
                            print(f"| {kind} | {writers} | {rows} | {n_tables} | {path} | {r['statements_s']:.1f} | "
                                  f"{r['rows_s']:.0f} | {r['p50'] * 1000:.0f} ms | {r['p99'] * 1000:.0f} ms | "
                                  f"{r['failures']} | {ratio} |", flush=True)
                            if r["first_error"]:
                                print(f"  first error: {r['first_error']}", flush=True)
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
