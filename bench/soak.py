"""Soak: bounded state over many coordinator commits (DESIGN §12, issue 14).

    python -m bench.soak [--commits 20000] [--tables 3] [--max-minutes 600] [--out soak.json]

An in-process server with one tiering worker and managed maintenance on
(`tierlake.maintenance.interval = 30 s`); `--tables` stream tables at 1 s
freshness (the last one with a primary key) get continuous small appends.
Rounds alone are too slow to reach thousands of coordinator commits, so a
driver job heartbeats directly through the procedure client: it takes
whatever table is due (empty `beat` tables, or a stream table, handed back
unchanged), reports it finished and makes it due again — four `sys` commits
per cycle (assignment, finish, round history, due).

At 10 %, 25 % and 100 % of `--commits` (or when `--max-minutes` ends the run)
it reports, per `sys` state table, the bytes and files under its location,
its snapshots and its newest metadata file; heartbeat and status-query p50
since the previous report; each lake table's data/delete files and
snapshots; a full scan of the first lake table. Targets: sizes at the end
≤ 1.2× their value at 25 %, latencies at the end ≤ 1.2× their value at 10 %.
Round history is kept `--history` (default 2 min) so the history tables
reach their steady state within the run (the default retention is 7 days).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path

from bench.common import start_server


def location_stats(path: str) -> dict:
    root = Path(path.removeprefix("file:"))
    files = [p for p in root.rglob("*") if p.is_file()]
    metadata = sorted((p for p in files if p.name.endswith(".metadata.json")), key=lambda p: p.stat().st_mtime)
    return {"bytes": sum(p.stat().st_size for p in files), "files": len(files),
            "metadata_files": len(metadata), "newest_metadata_bytes": metadata[-1].stat().st_size if metadata else 0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20000, help="coordinator (sys) commits to reach")
    parser.add_argument("--tables", type=int, default=3, help="stream tables with continuous appends")
    parser.add_argument("--beat-tables", type=int, default=4, help="empty tables the driver job cycles")
    parser.add_argument("--max-minutes", type=float, default=600.0)
    parser.add_argument("--history", default="2 min", help="tierlake.history.retention")
    parser.add_argument("--out", default="soak.json")
    args = parser.parse_args()

    server = start_server(**{"tierlake.tiering.workers": "1", "tierlake.coordinator.interval": "1 s",
                             "tierlake.maintenance.interval": "30 s", "tierlake.history.retention": args.history,
                             "tierlake.tiering.poll-interval": "0.2 s"})
    spark = server.spark
    from tierlake.server.clients.procedure_client import LocalClient
    from tierlake.server.runtime import housekeeping
    from tierlake.server.runtime.session import iceberg_table

    client = LocalClient(server)
    spark.sql("CREATE DATABASE IF NOT EXISTS soak")
    props = ("'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s', "
             "'table.datalake.snapshot.max-age'='1 min', 'table.datalake.snapshot.min-retained'='5'")
    from pyhive import hive

    cur = hive.connect("127.0.0.1", server.gateway.port, username="soak").cursor()
    streams = []
    for i in range(args.tables):
        pk = i == args.tables - 1
        cur.execute(f"CREATE TABLE soak.s{i} (id BIGINT, v STRING) TBLPROPERTIES ({props}"
                    + (", 'primary-key'='id', 'bucket.num'='2')" if pk else ")"))
        streams.append((f"soak.s{i}", pk))
    beats = []
    for i in range(args.beat_tables):
        spark.sql(f"CREATE TABLE soak.beat{i} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
        client.call("enable_tiering", table=f"soak.beat{i}")
        beats.append(f"soak.beat{i}")

    stop = threading.Event()

    def append() -> None:
        n = 0
        while not stop.is_set():
            for name, pk in streams:
                key = n % 50 if pk else n
                try:
                    if pk:  # _change_type NULL: an upsert
                        spark.sql(f"INSERT INTO {name} (id, v, _change_type) VALUES ({key}, 'v{n}', NULL)")
                    else:
                        spark.sql(f"INSERT INTO {name} (id, v) VALUES ({key}, 'v{n}')")
                except Exception as e:  # noqa: BLE001 - keep appending; counted at the end
                    print("append failed:", e)
            n += 1
            stop.wait(0.5)

    writer = threading.Thread(target=append, daemon=True)
    writer.start()

    job = "soak-driver"
    heartbeats: list[float] = []
    statuses: list[float] = []
    reports = []
    start_commits = housekeeping.commits_total()
    checkpoints = [int(args.commits * f) for f in (0.10, 0.25, 1.0)]
    started = time.monotonic()

    def report(label: str) -> dict:
        out = {"label": label, "commits": housekeeping.commits_total() - start_commits,
               "minutes": round((time.monotonic() - started) / 60, 1),
               "heartbeat_p50_ms": round(statistics.median(heartbeats) * 1000, 1) if heartbeats else None,
               "status_p50_ms": round(statistics.median(statuses) * 1000, 1) if statuses else None,
               "sys": {}, "lake": {}}
        for name in housekeeping.state_tables():
            if spark.catalog.tableExists(name):
                table = iceberg_table(spark, name)
                out["sys"][name] = dict(location_stats(str(table.location())),
                                        snapshots=sum(1 for _ in table.snapshots()))
        for name, _ in streams:
            lake = name.replace("soak.", "soak_lake.")
            if spark.catalog.tableExists(lake):
                table = iceberg_table(spark, lake)
                snap = table.currentSnapshot()
                summary = dict(snap.summary()) if snap is not None else {}
                out["lake"][lake] = {"data_files": int(summary.get("total-data-files", 0)),
                                     "delete_files": int(summary.get("total-delete-files", 0)),
                                     "snapshots": sum(1 for _ in table.snapshots()),
                                     **location_stats(str(table.location()))}
        first = streams[0][0].replace("soak.", "soak_lake.")
        t = time.perf_counter()
        spark.sql(f"SELECT count(*), sum(hash(*)) FROM {first}").collect()
        out["full_scan_ms"] = round((time.perf_counter() - t) * 1000, 1)
        heartbeats.clear()
        statuses.clear()
        print(json.dumps(out), flush=True)
        reports.append(out)
        Path(args.out).write_text(json.dumps(reports, indent=1))
        return out

    def make_due(path: str) -> None:
        def change(states, now):
            state = next((s for s in states.values() if s.path == path), None)
            if state is None or state.status.value != "Scheduled":
                return None, False, []
            state.next_due = now
            return None, True, []

        server.coordinator.mutate(change)

    cycle = 0
    while checkpoints:
        if time.monotonic() - started > args.max_minutes * 60:
            break
        _, states = server.coordinator.load()
        if any(s.status is not None and s.status.value == "Pending" and s.path not in beats
               for s in states.values()):
            # A stream table is due: give the tiering worker a head start. A
            # busy worker could not take it anyway; the driver then hands it
            # back unchanged (a round of 0 rows) and it is due again in 1 s.
            time.sleep(0.3)
        t = time.perf_counter()
        rows = client.call("heartbeat", job_id=job, request_table=True)
        heartbeats.append(time.perf_counter() - t)
        for kind, table_id, path, epoch, _ in rows:
            if kind != "assigned":
                continue
            _, states = server.coordinator.load()
            position = states[table_id].tiered_position
            t = time.perf_counter()
            client.call("heartbeat", job_id=job, finished_tables=[
                {"table_id": table_id, "tiering_epoch": epoch, "tiered_position": position}])
            heartbeats.append(time.perf_counter() - t)
            if path in beats:
                make_due(path)
        cycle += 1
        if cycle % 10 == 0:
            t = time.perf_counter()
            spark.sql("SELECT * FROM sys.lake_tiering_status").collect()
            statuses.append(time.perf_counter() - t)
        if housekeeping.commits_total() - start_commits >= checkpoints[0]:
            report(f"{checkpoints.pop(0)} commits")
    report("end" if not checkpoints else f"stopped by --max-minutes at {housekeeping.commits_total() - start_commits}")
    stop.set()
    writer.join(timeout=60)
    # Every appended row reached the lake exactly once.
    deadline = time.monotonic() + 180
    for name, pk in streams:
        lake = name.replace("soak.", "soak_lake.")
        query = "SELECT count(*) FROM (SELECT DISTINCT id FROM {})" if pk else "SELECT count(*) FROM {}"
        while True:
            want = spark.sql(query.format(name)).first()[0]
            have = spark.sql(f"SELECT count(*) FROM {lake}").first()[0]
            if want == have or time.monotonic() > deadline:
                print(f"{name}: stream {want} rows (keys), lake {have}", flush=True)
                break
            time.sleep(2)
    rounds = spark.sql("SELECT outcome, count(*) FROM sys.tiering_rounds GROUP BY outcome").collect()
    maint = spark.sql("SELECT kind, count(*), count(error) FROM sys.lake_maintenance GROUP BY kind").collect()
    print("rounds (within retention):", [tuple(r) for r in rounds], flush=True)
    print("maintenance (within retention):", [tuple(r) for r in maint], flush=True)
    server.stop()
    os._exit(0)


if __name__ == "__main__":
    main()
