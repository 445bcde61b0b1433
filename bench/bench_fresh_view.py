"""Fresh views (docs/tiering.md, "Fresh views") against the lake table alone.

    python -m bench.bench_fresh_view [--rows 1000000] [--history 10000000] [--pending 1000] [--runs 7]

Two primary-key tables (``sequence-by`` column, log retention off), each with
a lake table of ``--rows`` keys and ``--pending`` un-tiered changes (updates,
deletes and new keys, one commit) after the tiered position:

- ``short``: the lake was tiered from one ``--rows``-row commit;
- ``long``: the lake was tiered from ``--history`` rows of changes (the same
  keys updated over and over, in 10 commits), i.e. a long stream history
  behind the position.

For each, ``SELECT count(*)`` and a key lookup (``WHERE id = …``) on the
fresh view and on the lake table alone, p50 (p95) over ``--runs`` after two
warm-up runs. Targets (issue 17): fresh ≤ 1.5× lake-only with the pending
changes; ``long`` ≤ 1.2× ``short`` for the fresh view (its stream part reads
only the files committed after the position: ``tierlake_inc``, docs/tiering.md
"Fresh views"). Data is generated with
``spark.range`` (no row-by-row inserts); rounds run in the bench's thread.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from typing import Any

from bench.common import p, sample, start_server

DB = "bench_fresh"


def force_round(spark: Any, table: str) -> None:
    from tierlake.server.catalog.spec import TieredSpec
    from tierlake.server.catalog.table_path import parse_table_path
    from tierlake.server.changelog import planner
    from tierlake.server.runtime.session import iceberg_table
    from tierlake.server.tiering.round import run_round

    stream = parse_table_path(table)
    lake = parse_table_path(f"{stream.database}_lake.{stream.table}")
    props = {str(k): str(v) for k, v in dict(iceberg_table(spark, stream.quoted).properties()).items()}
    plan = planner.plan_round(spark, stream, lake, TieredSpec.from_properties(props))
    run_round(spark, plan, table_id=0, epoch=0, job_id="bench", check_epoch=lambda: None,
              max_duration_s=3600, chunk_rows=1 << 62)
    from tierlake.server.changelog import fresh_view

    fresh_view.settle()  # the view re-pinned to the new lake snapshot (it runs behind the round)


def build(server: Any, name: str, rows: int, history: int, pending: int) -> str:
    """A tiered primary-key table whose lake holds ``rows`` keys, tiered from a
    stream history of ``history`` rows, plus ``pending`` un-tiered changes."""
    spark = server.spark
    table = f"{DB}.{name}"
    handler = server.gateway.handler
    handler = getattr(handler, "inner", handler)  # the CALL handler behind the sys read cache
    handler.create_tiered(
        f"CREATE TABLE {table} (id BIGINT, v DOUBLE, note STRING, seq BIGINT) TBLPROPERTIES ("
        "'table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='4', 'sequence-by'='seq', "
        "'table.datalake.freshness'='1 h')")
    commits = max(1, history // rows)
    per_commit = history // commits
    for c in range(commits):
        # Every key once per commit (the last commit leaves v = seq of that commit).
        spark.range(c * per_commit, (c + 1) * per_commit).selectExpr(
            f"id % {rows} AS id", "CAST(id AS DOUBLE) AS v", "concat('n', id) AS note", "id AS seq",
            "CAST(NULL AS STRING) AS _change_type").writeTo(table).append()
    started = time.monotonic()
    force_round(spark, table)
    print(f"# {name}: tiered {history} rows of history into {rows} keys in {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    # The pending changes: updates of existing keys, deletes, new keys (seq above the history's).
    spark.range(pending).selectExpr(
        f"CASE WHEN id % 3 = 2 THEN {rows} + id ELSE id * 997 % {rows} END AS id", "-1.0D AS v", "'pending' AS note",
        f"{history} + id AS seq", "CASE WHEN id % 3 = 1 THEN '-D' ELSE '+U' END AS _change_type",
    ).writeTo(table).append()
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    server = start_server(**{"tierlake.tiering.workers": "0", "tierlake.coordinator.interval": "1 h"})
    spark = server.spark
    try:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {DB}")
        tables = {"short": build(server, "short", args.rows, args.rows, args.pending),
                  "long": build(server, "long", args.rows, args.history, args.pending)}
        results: dict[tuple[str, str, str], list[float]] = {}
        for kind, table in tables.items():
            name = table.split(".")[1]
            fresh, lake = f"{DB}_fresh.{name}", f"{DB}_lake.{name}"
            # The stream part reads incrementally (tierlake_inc) unless the view fell back to a full scan.
            text = spark.sql(f"SHOW CREATE TABLE {fresh}").collect()[0][0]
            print(f"# {kind}: the view's stream part is {'incremental' if 'tierlake_inc' in text else 'a FULL SCAN'}",
                  file=sys.stderr)
            # Pending changes: a third delete, a third update existing keys, a third are new keys.
            count = spark.sql(f"SELECT count(*) FROM {fresh}").collect()[0][0]
            assert count == args.rows + sum(1 for i in range(args.pending) if i % 3 == 2) - sum(
                1 for i in range(args.pending) if i % 3 == 1), (kind, count)
            key = 3 * 997 % args.rows  # updated by pending change 3
            looked_up = spark.sql(f"SELECT v, note FROM {fresh} WHERE id = {key}").collect()
            assert [tuple(r) for r in looked_up] == [(-1.0, "pending")], looked_up
            for label, target in (("fresh view", fresh), ("lake table", lake)):
                results[(kind, "count", label)] = sample(
                    lambda t=target: spark.sql(f"SELECT count(*) FROM {t}").collect(), args.runs)
                results[(kind, "lookup", label)] = sample(
                    lambda t=target, k=key: spark.sql(f"SELECT * FROM {t} WHERE id = {k}").collect(), args.runs)
        report(args, results)
    finally:
        server.stop()


def report(args: argparse.Namespace, results: dict[tuple[str, str, str], list[float]]) -> None:
    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.0f} ({p(values, 0.95) * 1000:.0f}) ms"

    print(f"Command: `PYTHONPATH=. .venv/bin/python -m bench.bench_fresh_view {shlex.join(sys.argv[1:])}`\n")
    print(f"{args.rows:,} keys, {args.pending:,} pending changes; history behind the position: "
          f"short = {args.rows:,} rows, long = {args.history:,} rows.\n")
    print("| query | history | fresh view p50 (p95) | lake table p50 (p95) | fresh ÷ lake (≤ 1.5) |")
    print("|---|---|---|---|---|")
    for query in ("count", "lookup"):
        for kind in ("short", "long"):
            fresh, lake = results[(kind, query, "fresh view")], results[(kind, query, "lake table")]
            print(f"| {'SELECT count(*)' if query == 'count' else 'key lookup'} | {kind} | {ms(fresh)} | {ms(lake)} "
                  f"| {statistics.median(fresh) / statistics.median(lake):.2f}× |")
    print("\n| query | fresh view long ÷ short (≤ 1.2) |\n|---|---|")
    for query in ("count", "lookup"):
        ratio = statistics.median(results[("long", query, "fresh view")]) / statistics.median(
            results[("short", query, "fresh view")])
        print(f"| {'SELECT count(*)' if query == 'count' else 'key lookup'} | {ratio:.2f}× |")


if __name__ == "__main__":
    main()
