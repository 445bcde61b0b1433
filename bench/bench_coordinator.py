"""Coordinator latency through the gateway with 100 registered tables.

    python -m bench.bench_coordinator [--tables 100] [--runs 30]

Prints a markdown table: p50/p95 of each call and its ratio to the raw
Spark equivalent run through the same gateway in the same process (a bare
read of the state table for the view; a one-row Iceberg INSERT, i.e. one
commit, for state-changing heartbeats).
"""

from __future__ import annotations

import argparse
import itertools

from tierlake_client.sqltext import call_statement

from bench.common import row, sample, start_server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    server = start_server(**{"tierlake.coordinator.interval": "1 h", "tierlake.tiering.workers": "0"})
    spark = server.spark
    from pyhive import hive

    cur = hive.connect("127.0.0.1", server.gateway.port, username="bench").cursor()

    def q(statement: str):
        cur.execute(statement)
        return cur.fetchall() if cur.description and [d[0] for d in cur.description] != ["Result"] else None

    def call(procedure: str, **arguments):
        return q(call_statement(procedure, arguments))

    spark.sql("CREATE DATABASE IF NOT EXISTS bench")
    for i in range(args.tables):
        spark.sql(f"CREATE TABLE IF NOT EXISTS bench.t{i} (id BIGINT) USING iceberg "
                  "TBLPROPERTIES ('table.datalake.freshness' = '1 h')")
        call("enable_tiering", table=f"bench.t{i}")
    spark.sql("CREATE TABLE IF NOT EXISTS bench.baseline (id BIGINT) USING iceberg")
    server.coordinator.tick()  # all due: Pending

    # A job holding 5 tables.
    held = [r for r in (call("heartbeat", job_id="holder", request_table=True) for _ in range(5)) for r in r]
    renew = [{"table_id": r[1], "tiering_epoch": r[3]} for r in held]

    results = []
    view = sample(lambda: q("SELECT * FROM sys.lake_tiering_status"), args.runs)
    raw_read = sample(lambda: q("SELECT * FROM sys.tiering_tables"), args.runs)
    counter = itertools.count()
    insert = sample(lambda: q(f"INSERT INTO bench.baseline VALUES ({next(counter)})"), args.runs)
    renewal = sample(lambda: call("heartbeat", job_id="holder", tiering_tables=renew), args.runs)

    # Round boundary: finish the table assigned last time, get the next one.
    current = {"entry": None}

    def boundary():
        finished = [current["entry"]] if current["entry"] else []
        rows = call("heartbeat", job_id="worker", finished_tables=finished, request_table=True)
        assigned = [r for r in rows if r[0] == "assigned"]
        current["entry"] = {"table_id": assigned[0][1], "tiering_epoch": assigned[0][3], "rows": 1}

    boundary_t = sample(boundary, min(args.runs, args.tables - 10))
    # Nothing pending: everything is Tiering or Scheduled for the next hour.
    while any(r[0] == "assigned" for r in call("heartbeat", job_id="drain", request_table=True)):
        pass
    idle = sample(lambda: call("heartbeat", job_id="idle", request_table=True), args.runs)

    results.append(
        f"Coordinator, {args.tables} registered tables, {args.runs} runs each, through the gateway (PyHive):"
    )
    results.append("")
    results.append("| call | p50 | p95 | ratio to raw Spark |")
    results.append("|---|---|---|---|")
    results.append(row("`SELECT * FROM sys.lake_tiering_status`", view, raw_read))
    results.append(row("raw: `SELECT * FROM sys.tiering_tables`", raw_read))
    results.append(row("`sys.heartbeat`: renew 5 tables", renewal, raw_read))
    results.append(row("`sys.heartbeat`: request_table, nothing pending", idle, raw_read))
    results.append(row("`sys.heartbeat`: finish 1 + assign 1 (state change)", boundary_t, insert))
    results.append(row("raw: one-row `INSERT` into an Iceberg table (one commit)", insert))
    print("\n".join(results))
    server.stop()


if __name__ == "__main__":
    main()
