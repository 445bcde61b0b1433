"""Soak: bounded state over many coordinator commits (docs/design.md, 'Running for months'; issue 14).

    python -m bench.soak [--commits 20000] [--tables 3] [--max-minutes 600] [--out soak.json]

An in-process server with one tiering worker and managed maintenance on
(`tierlake.maintenance.interval = 30 s`); `--tables` stream tables at 1 s
freshness (the last one with a primary key) get continuous small appends.
Rounds alone are too slow to reach thousands of coordinator commits, so a
driver job cycles `--beat-tables` empty tables of its own (freshness 1 d, so
the scheduler never hands them to the worker): it claims one (Scheduled →
Pending → Tiering with a new epoch, what a heartbeat's assignment does, in one
commit) and reports it finished through `CALL sys.heartbeat` (a second
commit, plus the round history written behind the state). The worker tiers
only the stream tables, with real rounds.

The primary-key stream keeps its changelog back to its newest KV snapshot
(a rebuild reads the log after it), so its snapshots are bounded by the
older of the 1-minute max age and that KV snapshot. With KV snapshots every
minute checked every minute (the defaults' ratio inverted: 10 min against a
max age of 1 d) the newest one is up to two minutes old and the stream's
window alternates between one and two minutes of appends; the soak takes one
every 30 s, checked every 10 s, so the max age bounds it, as in production.

Sizes are sampled every `--sample-every` commits (about every 5 s, so the
peak is the saw-tooth's, not a sample's phase); each report gives, per
`sys` state table and per lake and stream table, the *peak* since the previous
report (bytes and files under its location, snapshots, newest metadata file)
and the value at the report: the sys tables' snapshots follow a saw-tooth
(expired every 50 commits of a table and every housekeeping minute), so a
single sample measures the phase of the saw-tooth, while the peak measures
growth. Reports at 10 %, 25 %, then every 15 % up to 100 % of `--commits`
(or when `--max-minutes` ends the run) also give heartbeat and status-query
p50 since the previous report and the median of `SCANS` full scans of the first lake table,
taken while the appender holds back (`QUIET_S` seconds first, for the rounds of the last appends
to finish): the scan measures the table's state, not which round or compaction it met on the two
cores (a run's scans at 14,000 commits spread 143–301 ms). At
the end it prints the targets, each with its ratio: peak sizes in the last
window (85–100 %) ≤ 1.2× the peak in the window of the same length ending at
25 % (a longer window catches a higher saw-tooth peak by its length alone).
Lake and stream bytes of log tables are excepted: they hold the appended
rows, which grow by design; their file and snapshot counts are held to the
target. Latencies at the end
≤ 1.2× their value at 10 %. Round history is kept `--history` (default 2
min) so the history tables reach their steady state within the run (the
default retention is 7 days).
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

SCANS = 5  # full scans of the first lake table per report; their median is reported
QUIET_S = 3.0  # seconds without appends before the scans


def location_stats(path: str) -> dict:
    root = Path(path.removeprefix("file:"))
    sizes: dict[Path, tuple[int, float]] = {}
    for p in root.rglob("*"):
        try:  # housekeeping deletes files while we walk
            st = p.stat()
        except FileNotFoundError:
            continue
        if p.is_file():
            sizes[p] = (st.st_size, st.st_mtime)
    metadata = sorted((p for p in sizes if p.name.endswith(".metadata.json")), key=lambda p: sizes[p][1])
    return {"bytes": sum(v[0] for v in sizes.values()), "files": len(sizes),
            "metadata_files": len(metadata), "newest_metadata_bytes": sizes[metadata[-1]][0] if metadata else 0}


SIZE_KEYS = ("bytes", "files", "metadata_files", "newest_metadata_bytes", "snapshots", "data_files", "delete_files")


def print_verdict(reports: list[dict], log_tables: set[str]) -> bool:
    """Targets with their ratios: peak sizes of the last window against the
    window ending at 25 %, latencies at the end against 10 %."""
    if len(reports) < 3:
        print("verdict: fewer than three reports (run stopped early): no verdict", flush=True)
        return False
    first, quarter, last = reports[0], reports[1], reports[-1]
    ok, lines = True, []
    for name, peak in sorted(last["peak"].items()):
        base = quarter["peak"].get(name, {})
        for key in SIZE_KEYS:
            if key == "bytes" and name in log_tables:
                continue  # the appended rows themselves
            value, before = peak.get(key, 0), base.get(key, 0)
            ratio = value / before if before else (1.0 if value == 0 else float("inf"))
            # Counts of a few: one file more is not growth (3 -> 4 is 1.33x).
            passed = ratio <= 1.2 or value - before <= 2
            ok &= passed
            if not passed or key in ("bytes", "snapshots", "newest_metadata_bytes", "data_files"):
                lines.append(f"| {name} {key} (peak) | {before} | {value} | {ratio:.2f}× | {'✓' if passed else '✗'} |")
    for key in ("heartbeat_p50_ms", "status_p50_ms", "full_scan_ms"):
        value, before = last.get(key), first.get(key)
        if value is None or not before:
            continue
        ratio = value / before
        passed = ratio <= 1.2
        ok &= passed
        lines.append(f"| {key} | {before} | {value} | {ratio:.2f}× | {'✓' if passed else '✗'} |")
    print("| measure | at 25 % (latencies: 10 %) | end | ratio | ≤ 1.2× |\n|---|---|---|---|---|", flush=True)
    print("\n".join(lines), flush=True)
    print("verdict:", "all targets met" if ok else "NOT met", flush=True)
    return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20000, help="coordinator (sys) commits to reach")
    parser.add_argument("--tables", type=int, default=3, help="stream tables with continuous appends")
    parser.add_argument("--beat-tables", type=int, default=4, help="empty tables the driver job cycles")
    parser.add_argument("--max-minutes", type=float, default=600.0)
    parser.add_argument("--append-every", type=float, default=2.0, help="seconds between appends to each stream")
    parser.add_argument("--history", default="2 min", help="tierlake.history.retention")
    parser.add_argument("--sample-every", type=int, default=25, help="commits between size samples")
    parser.add_argument("--out", default="soak.json")
    args = parser.parse_args()

    server = start_server(**{"tierlake.tiering.workers": "1", "tierlake.coordinator.interval": "1 s",
                             "tierlake.maintenance.interval": "30 s", "tierlake.history.retention": args.history,
                             # KV snapshots checked every 10 s (default 1 min): see the module docstring.
                             "tierlake.kv.maintenance-interval": "10 s",
                             "tierlake.tiering.poll-interval": "0.2 s"})
    spark = server.spark
    from tierlake.server.clients.procedure_client import LocalClient
    from tierlake.server.coordinator import state_machine
    from tierlake.server.runtime.session import iceberg_table
    from tierlake.server.state import housekeeping

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
                    + (", 'primary-key'='id', 'bucket.num'='2', 'kv.snapshot.interval'='30 s')" if pk else ")"))
        streams.append((f"soak.s{i}", pk))
    beats = []
    for i in range(args.beat_tables):
        # Freshness of a day: the scheduler never makes a beat table due, so
        # the tiering worker never takes one (it would run a real empty round,
        # which costs the JVM a second and halves the commit rate); the
        # driver claims them itself.
        spark.sql(f"CREATE TABLE soak.beat{i} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2', "
                  "'table.datalake.freshness'='1 d')")
        client.call("enable_tiering", table=f"soak.beat{i}")
        beats.append(f"soak.beat{i}")

    stop = threading.Event()

    quiet = threading.Event()  # set while a report scans: the appender holds back

    def append() -> None:
        n = 0
        while not stop.is_set():
            while quiet.is_set() and not stop.is_set():
                stop.wait(0.2)
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
            stop.wait(args.append_every)

    writer = threading.Thread(target=append, daemon=True)
    writer.start()

    job = "soak-driver"
    heartbeats: list[float] = []
    statuses: list[float] = []
    reports = []
    start_commits = housekeeping.commits_total()
    checkpoints = [int(args.commits * f) for f in (0.10, 0.25, 0.40, 0.55, 0.70, 0.85, 1.0)]
    started = time.monotonic()
    lakes = [name.replace("soak.", "soak_lake.") for name, _ in streams]
    log_tables = {name for name, pk in streams if not pk} | {n.replace("soak.", "soak_lake.")
                                                           for n, pk in streams if not pk}

    def sizes() -> dict:
        out = {}
        for name in housekeeping.state_tables() + lakes + [n for n, _ in streams]:
            if not spark.catalog.tableExists(name):
                continue
            table = iceberg_table(spark, name)
            snap = table.currentSnapshot()
            summary = dict(snap.summary()) if snap is not None else {}
            out[name] = dict(location_stats(str(table.location())), snapshots=sum(1 for _ in table.snapshots()),
                             data_files=int(summary.get("total-data-files", 0)),
                             delete_files=int(summary.get("total-delete-files", 0)))
        return out

    peaks: dict = {}

    def sample_sizes() -> dict:
        now = sizes()
        for name, measures in now.items():
            peak = peaks.setdefault(name, {})
            for key, value in measures.items():
                peak[key] = max(peak.get(key, 0), value)
        return now

    def report(label: str) -> dict:
        now = sample_sizes()
        out = {"label": label, "commits": housekeeping.commits_total() - start_commits,
               "minutes": round((time.monotonic() - started) / 60, 1),
               "heartbeat_p50_ms": round(statistics.median(heartbeats) * 1000, 1) if heartbeats else None,
               "status_p50_ms": round(statistics.median(statuses) * 1000, 1) if statuses else None,
               "heartbeats": len(heartbeats), "status_queries": len(statuses),
               "now": now, "peak": {k: dict(v) for k, v in peaks.items()}}
        # The median of several scans: rounds and maintenance share the JVM's
        # two cores, and one scan that meets a compaction measures the
        # compaction (one run's last single scan took 7x its neighbours).
        scans = []
        quiet.set()
        try:
            time.sleep(QUIET_S)
            for _ in range(SCANS):
                t = time.perf_counter()
                spark.sql(f"SELECT count(*), sum(hash(*)) FROM {lakes[0]}").collect()
                scans.append(time.perf_counter() - t)
        finally:
            quiet.clear()
        out["full_scan_ms"] = round(statistics.median(scans) * 1000, 1)
        out["full_scans_ms"] = [round(x * 1000, 1) for x in scans]
        heartbeats.clear()
        statuses.clear()
        peaks.clear()
        print(json.dumps({k: v for k, v in out.items() if k not in ("now", "peak")}), flush=True)
        reports.append(out)
        Path(args.out).write_text(json.dumps(reports, indent=1))
        return out

    def claim() -> tuple[int, int, int | None] | None:
        # The scheduler's due -> Pending and a heartbeat's assignment, applied
        # to a beat table only, in one commit of the state table: the tiering
        # worker never sees it Pending.
        def change(states, now):
            idle = [s for s in states.values() if s.path in beats and s.status.value == "Scheduled"]
            if not idle:
                return None, False, []
            state = min(idle, key=lambda s: s.updated_at)
            state_machine.transition(state, state_machine.Status.PENDING, now)
            state_machine.assign(state, job, now)
            return (state.table_id, state.tiering_epoch, state.tiered_position), True, []

        return server.coordinator.mutate(change)

    cycle, next_sample = 0, args.sample_every
    while checkpoints:
        if time.monotonic() - started > args.max_minutes * 60:
            break
        claimed = claim()
        if claimed is not None:
            table_id, epoch, position = claimed
            t = time.perf_counter()
            rows = client.call("heartbeat", job_id=job, finished_tables=[
                {"table_id": table_id, "tiering_epoch": epoch, "tiered_position": position}])
            heartbeats.append(time.perf_counter() - t)
            assert rows[0][-1] is None, rows  # the finish was accepted
        cycle += 1
        if cycle % 10 == 0:
            t = time.perf_counter()
            spark.sql("SELECT * FROM sys.lake_tiering_status").collect()
            statuses.append(time.perf_counter() - t)
        done = housekeeping.commits_total() - start_commits
        if done >= next_sample:
            sample_sizes()
            next_sample = done + args.sample_every
        if done >= checkpoints[0]:
            report(f"{checkpoints.pop(0)} commits")
    if checkpoints:
        report(f"stopped by --max-minutes at {housekeeping.commits_total() - start_commits}")
    print_verdict(reports, log_tables)
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
