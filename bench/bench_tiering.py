"""Tiering rounds against the raw Spark statements they replace (docs/design.md, 'Performance targets').

    python -m bench.bench_tiering [--rows 1000000] [--runs 10] [--delta 1000] [--phases 1,2,3,4]
                                  [--master local[2] | standalone | spark://HOST:PORT]

One in-process server (no background tiering worker, coordinator ticker
parked); every round is driven synchronously by a bench-owned
``server.tiering.worker.Worker``: heartbeat → ``Worker.tier`` (plan, write
into a branch, fast-forward = lake commit, report). A round's time is
``Worker.tier`` alone; the assigning heartbeat is not in it, except in the
one-row end-to-end round. Prints a markdown table; each line holds the
tierlake number, the raw Spark equivalent measured next to it in the same
process, their ratio, and the target of docs/design.md, 'Performance targets':

1. Log table: tiering N rows already in the stream table (written by Spark
   in 4 commits) vs a bare ``INSERT INTO <plain Iceberg table> SELECT <cols>
   FROM <stream table>`` of the same rows. Ratio = tiering rows/s ÷ raw
   rows/s (≥ 0.9): what the branch, the commit properties, the planning and
   the reporting cost on top of the copy itself.
2. Primary-key table: a delta of N/10 changes (updates, a second update of
   some keys, new keys, ``-D`` deletes; ``_change_type`` column, ordered by
   a ``sequence-by`` column) tiered into a lake table holding N rows vs a
   hand-written ``MERGE`` (latest change per key wins) of the very same
   stream rows (an incremental read of the same snapshots) into a copy of
   the lake table built the same way. Ratio = raw time ÷ tiering time
   ("throughput ratio", ≥ 0.9). The initial N-row load is reported the same
   way (no target). Both results are compared row by row (count + hash).
   The raw ``MERGE`` runs with Spark's defaults, as a user's session has
   them; tierlake's own runs with Spark's storage-partitioned-join settings
   (stream and lake are bucketed alike: ``lake_write.bucketed_merge``). Line
   2b, for reference, runs the raw ``MERGE`` with those settings too.
3. Scaling: a 1000-change delta into a primary-key lake table of S = N/10
   rows vs one of 10×S rows, alternating, p50 over --runs rounds each.
   Ratio = time(10×S) ÷ time(S) (≤ 1.5: bucketing and merge-on-read should
   keep a small delta's cost from growing with the table).
4. Latency, p50 (p95) over --runs: an empty round (nothing new: plan +
   report; ≤ 0.5 s) and a one-row round end to end (one-row ``INSERT``
   through the gateway, the assigning heartbeat and the round; ≤ 3 s), for
   a log and a primary-key table; the raw line is the one-row ``INSERT``
   through the gateway alone. Run last (every statement's code warm),
   after a JVM garbage collection of the large phases' garbage.

Throughput line 1 is a single measurement after a warm-up round on a small
table (the same statements, so the JIT and Spark's caches are warm); lines
2 and 2a are medians of --pk-runs runs, each on new tables, after one
warm-up run on small tables.
The machine has 2 cores: other load moves the numbers.

``--master`` runs the same server on a Spark cluster instead of ``local[2]``
(``standalone``: a master and one worker from pyspark's jars, started for the
run; the server's application gets one executor of 2 cores and 1 GB), to set
a round's and an INSERT's cost there beside local; ``--phases`` picks phases
(``--phases 1,4 --rows 100000`` for a short comparison).

Below the table, each kind of round is split into its steps (the worker's
step hook and the times of its heartbeats): plan, write into the branch,
epoch check, fast-forward, after the lake commit, finishing heartbeat, and the wait for the
fresh view's re-pin that runs behind the round (not part of it); this shows
which fixed costs keep small rounds from their targets.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.common import add_master_argument, p, spark_master, start_server

JOB = "bench-job"
DB = "bench"
LAKE_DB = "bench_lake"  # <db> + tierlake.lake.database-suffix (default _lake)

LOG_COLUMNS = "(`id` BIGINT, `name` STRING, `amount` DOUBLE, `ts` TIMESTAMP)"
LOG_SELECT = ["`id`", "concat('name-', CAST(`id` AS STRING)) AS `name`", "CAST(`id` AS DOUBLE) * 0.5 AS `amount`",
              "timestamp_seconds(1700000000 + `id`) AS `ts`"]
PK_COLUMNS = "(`id` BIGINT, `name` STRING, `amount` DOUBLE, `seq` BIGINT)"
# Every tiered table is due again 1 s after its round (freshness 1 s, the minimum) and a
# round is never cut short (the maximum round duration defaults to freshness).
LOG_PROPS = ("TBLPROPERTIES ('table.datalake.enabled' = 'true', 'table.datalake.freshness' = '1 s', "
             "'table.datalake.tiering.max-round-duration' = '1 h')")
PK_PROPS = ("TBLPROPERTIES ('table.datalake.enabled' = 'true', 'primary-key' = 'id', 'bucket.num' = '4', "
            "'sequence-by' = 'seq', 'table.datalake.freshness' = '1 s', "
            "'table.datalake.tiering.max-round-duration' = '1 h')")
RAW_PK_PROPS = ("PARTITIONED BY (bucket(4, `id`)) TBLPROPERTIES ('format-version' = '2', "
                "'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
                "'write.delete.mode' = 'merge-on-read')")

# The hand-written MERGE: the latest change per key (by `seq`) wins; -U
# before-images are skipped, -D deletes, anything else upserts. Reads the
# delta from the temp view `__bench_delta`.
RAW_MERGE = """
MERGE INTO {target} AS t
USING (
  SELECT `id`, `name`, `amount`, `seq`, `_change_type`
  FROM (
    SELECT d.*, row_number() OVER (PARTITION BY d.`id` ORDER BY d.`seq` DESC) AS `__rank`
    FROM `__bench_delta` d
    WHERE d.`_change_type` IS NULL OR d.`_change_type` <> '-U'
  ) ranked
  WHERE `__rank` = 1
) AS s
ON t.`id` = s.`id`
WHEN MATCHED AND s.`_change_type` = '-D' THEN DELETE
WHEN MATCHED THEN UPDATE SET t.`name` = s.`name`, t.`amount` = s.`amount`, t.`seq` = s.`seq`
WHEN NOT MATCHED AND (s.`_change_type` IS NULL OR s.`_change_type` <> '-D') THEN
  INSERT (`id`, `name`, `amount`, `seq`) VALUES (s.`id`, s.`name`, s.`amount`, s.`seq`)
"""
CHECKSUM = ("SELECT count(*) AS `n`, sum(CAST(xxhash64(`id`, `name`, `amount`, `seq`) AS DECIMAL(38, 0))) AS `h` "
            "FROM {table}")


def q(name: str, db: str = DB) -> str:
    return f"`{db}`.`{name}`"


def pk_changes(keys: int, first_seq: int) -> list[str]:
    """selectExpr turning ``spark.range`` values into changes to a table holding keys ``0..keys-1``.

    Per 10 changes: 5 updates, 1 second update of the key updated 9 changes
    earlier, 2 new keys, 1 delete, 1 -U before-image (skipped by both sides).
    Keys spread over the whole key space (7919 is prime).
    """
    old_key = f"pmod(`id` * 7919, {keys})"
    kind = "pmod(`id`, 10)"
    return [
        f"CASE WHEN {kind} IN (6, 7) THEN {keys} + `id` "
        f"WHEN {kind} = 9 THEN pmod((`id` - 9) * 7919, {keys}) ELSE {old_key} END AS `id`",
        "concat('change-', CAST(`id` AS STRING)) AS `name`",
        "CAST(`id` AS DOUBLE) AS `amount`",
        f"{first_seq} + `id` AS `seq`",
        f"CASE WHEN {kind} IN (6, 7) THEN '+I' WHEN {kind} = 8 THEN '-D' WHEN {kind} = 5 THEN '-U' "
        "ELSE '+U' END AS `_change_type`",
    ]


class RecordingClient:
    """The coordinator client of the bench's worker; keeps what rounds report
    and when each heartbeat ran (``calls``: kind, start, end)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.finished: list[dict] = []
        self.failed: list[dict] = []
        self.calls: list[tuple[str, float, float]] = []

    def call(self, procedure: str, **arguments: Any) -> list[tuple]:
        self.finished.extend(arguments.get("finished_tables") or [])
        self.failed.extend(arguments.get("failed_tables") or [])
        kind = ("finish" if arguments.get("finished_tables") else "renew" if arguments.get("tiering_tables")
                else procedure)
        started = time.perf_counter()
        try:
            return self.inner.call(procedure, **arguments)
        finally:
            self.calls.append((kind, started, time.perf_counter()))


class Bench:
    def __init__(self, server: Any):
        from pyhive import hive

        from tierlake.server.clients.procedure_client import LocalClient
        from tierlake.server.tiering.worker import Worker

        self.server = server
        self.spark = server.spark
        self.client = RecordingClient(LocalClient(server))
        self.worker = Worker(server.spark, self.client, JOB, server.config)
        self.cursor = hive.connect("127.0.0.1", server.gateway.port, username="bench").cursor()
        self.steps: list[tuple[str, float]] = []
        self.worker.hook = lambda name: self.steps.append((name, time.perf_counter()))
        self.last_steps: dict[str, float] = {}  # the last round's time per step
        self.breakdowns: dict[str, list[dict[str, float]]] = {}

    def keep(self, label: str) -> None:
        """File the last round's step times under ``label``."""
        self.breakdowns.setdefault(label, []).append(self.last_steps)

    # -- helpers -----------------------------------------------------------------
    def gateway(self, statement: str, params: dict | None = None) -> list[tuple] | None:
        self.cursor.execute(statement, params)
        if self.cursor.description and [d[0] for d in self.cursor.description] != ["Result"]:
            return self.cursor.fetchall()
        return None

    def create_tiered(self, name: str, pk: bool) -> None:
        """Through the gateway: stream table, lake table, registration."""
        self.gateway(f"CREATE TABLE {q(name)} {PK_COLUMNS if pk else LOG_COLUMNS} {PK_PROPS if pk else LOG_PROPS}")

    def disable(self, name: str) -> None:
        self.client.call("disable_tiering", table=f"{DB}.{name}")

    def snapshot_id(self, table: str) -> int | None:
        from tierlake.server.runtime.session import iceberg_table

        snapshot = iceberg_table(self.spark, table).currentSnapshot()
        return None if snapshot is None else int(snapshot.snapshotId())

    def append(self, name: str, lo: int, hi: int, select: list[str], commits: int = 1) -> None:
        """Rows ``lo..hi-1`` of ``spark.range`` into the stream table, in ``commits`` commits."""
        step = max(1, -(-(hi - lo) // commits))
        for start in range(lo, hi, step):
            self.spark.range(start, min(hi, start + step)).selectExpr(*select).writeTo(q(name)).append()

    def count(self, table: str) -> int:
        return int(self.spark.sql(f"SELECT count(*) AS `n` FROM {table}").collect()[0]["n"])

    def checksum(self, table: str) -> tuple:
        return tuple(self.spark.sql(CHECKSUM.format(table=table)).collect()[0])

    def assign(self, path: str) -> tuple[int, int]:
        """Heartbeat until ``path`` is assigned: ``(table_id, epoch)``.

        Another due table assigned first gets its (untimed) round: tables
        that take turns (phase 3) are all due after their rounds.
        """
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = self.client.call("heartbeat", job_id=JOB, request_table=True)
            assigned = [r for r in rows if r[0] == "assigned"]
            if not assigned:
                # Not due yet: a table is due one freshness interval (1 s, the minimum) after its round.
                self.server.coordinator.tick()
                time.sleep(0.05)
                continue
            _, table_id, assigned_path, epoch, _ = assigned[0]
            if assigned_path == path:
                return table_id, epoch
            self.run_round(table_id, assigned_path, epoch)
        raise RuntimeError(f"{path} was never assigned (is it registered and due?)")

    def run_round(self, table_id: int, path: str, epoch: int) -> dict:
        """``Worker.tier``; the round's finished entry, or an error if it failed."""
        finished, failed = len(self.client.finished), len(self.client.failed)
        self.steps, self.client.calls = [], []
        started = time.perf_counter()
        self.worker.tier(table_id, path, epoch)
        self.last_round_s = time.perf_counter() - started
        self.last_steps = breakdown(started, self.steps, self.client.calls, time.perf_counter())
        # The fresh view's re-pin runs behind the round (its own thread): timed
        # on its own, so that it does not run into the next round's numbers.
        from tierlake.server.changelog import fresh_view

        repin = time.perf_counter()
        fresh_view.settle()
        self.last_steps["re-pin (behind the round)"] = time.perf_counter() - repin
        if len(self.client.failed) > failed:
            raise RuntimeError(f"round of {path} failed: {self.client.failed[-1].get('error_message')}")
        entries = [e for e in self.client.finished[finished:] if e["table_id"] == table_id]
        if not entries:
            raise RuntimeError(f"round of {path} reported nothing (fenced? see the tierlake log)")
        return entries[-1]

    def tier(self, name: str) -> tuple[float, dict]:
        """One timed round of ``bench.<name>``: ``(seconds, finished entry)``."""
        table_id, epoch = self.assign(f"{DB}.{name}")
        entry = self.run_round(table_id, f"{DB}.{name}", epoch)
        # The round as the worker runs it (``Worker.tier``): the fresh view's re-pin, which runs behind it on
        # its own thread while the worker goes on, is waited for but reported on its own line.
        return self.last_round_s, entry

    def tier_expect(self, name: str, rows: int) -> float:
        seconds, entry = self.tier(name)
        if entry.get("rows") != rows or entry.get("force_finished"):
            raise RuntimeError(f"round of {DB}.{name} tiered {entry.get('rows')} rows "
                               f"(force_finished={entry.get('force_finished')}), expected {rows}")
        return seconds

    def timed(self, fn: Callable[[], Any]) -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    def raw_merge(self, target: str, stream: str, start: int | None, end: int) -> float:
        """The hand-written MERGE of the stream's commits (start, end] into ``target``."""
        reader = self.spark.read.format("iceberg")
        if start is None:
            reader = reader.option("snapshot-id", str(end))
        else:
            reader = reader.option("start-snapshot-id", str(start)).option("end-snapshot-id", str(end))
        reader.load(stream).createOrReplaceTempView("__bench_delta")
        try:
            return self.timed(lambda: self.spark.sql(RAW_MERGE.format(target=target)))
        finally:
            self.spark.catalog.dropTempView("__bench_delta")

    # -- 1. log table throughput ---------------------------------------------------
    def log_throughput(self, rows: int, warm_rows: int) -> tuple[float, float]:
        for name, n in (("warm_log", warm_rows), ("log", rows)):
            self.create_tiered(name, pk=False)
            self.spark.sql(f"CREATE TABLE {q('raw_' + name)} {LOG_COLUMNS} USING iceberg "
                           "TBLPROPERTIES ('format-version' = '2')")
            self.append(name, 0, n, LOG_SELECT, commits=4)
        raw_insert = "INSERT INTO {raw} SELECT `id`, `name`, `amount`, `ts` FROM {stream}"
        # Warm-up: the same round and the same INSERT on a small table.
        self.tier_expect("warm_log", warm_rows)
        self.spark.sql(raw_insert.format(raw=q("raw_warm_log"), stream=q("warm_log")))
        self.disable("warm_log")

        raw_s = self.timed(lambda: self.spark.sql(raw_insert.format(raw=q("raw_log"), stream=q("log"))))
        tier_s = self.tier_expect("log", rows)
        self.keep("1. log table, N rows")
        self.disable("log")
        lake_rows, raw_rows = self.count(q("log", LAKE_DB)), self.count(q("raw_log"))
        if lake_rows != rows or raw_rows != rows:
            raise RuntimeError(f"log table: lake holds {lake_rows} rows, raw copy {raw_rows}, expected {rows}")
        return tier_s, raw_s

    # -- 2. primary-key throughput ---------------------------------------------------
    def spj_merge(self, target: str, stream: str, start: int | None, end: int) -> float:
        """The hand-written MERGE with the storage-partitioned-join settings tierlake's own MERGE runs with
        (``lake_write.bucketed_merge``): for reference, not the ratio's raw side."""
        from tierlake.server.changelog import lake_write

        with lake_write.bucketed_merge(self.spark):
            return self.raw_merge(target, stream, start, end)

    def pk_load(self, name: str, rows: int, raw: bool,
                label: str | None = None) -> tuple[float, float | None, float | None, int]:
        """``rows`` keys tiered into an empty lake table (and MERGEd into two raw copies: Spark's
        defaults, and the settings tierlake's MERGE uses)."""
        self.create_tiered(name, pk=True)
        self.append(name, 0, rows, pk_changes_initial(), commits=4)
        end = self.snapshot_id(q(name))
        raw_s = spj_s = None
        if raw:
            for prefix in ("raw_", "spj_"):
                self.spark.sql(f"CREATE TABLE {q(prefix + name)} {PK_COLUMNS} USING iceberg {RAW_PK_PROPS}")
            raw_s = self.raw_merge(q("raw_" + name), q(name), None, end)
            spj_s = self.spj_merge(q("spj_" + name), q(name), None, end)
        tier_s = self.tier_expect(name, rows)
        if label:
            self.keep(label)
        return tier_s, raw_s, spj_s, end

    def pk_delta(self, name: str, rows: int, delta: int, start: int,
                 label: str | None = None) -> tuple[float, float, float]:
        self.append(name, 0, delta, pk_changes(rows, first_seq=1), commits=3)
        end = self.snapshot_id(q(name))
        raw_s = self.raw_merge(q("raw_" + name), q(name), start, end)
        spj_s = self.spj_merge(q("spj_" + name), q(name), start, end)
        tier_s = self.tier_expect(name, delta)
        if label:
            self.keep(label)
        lake = self.checksum(q(name, LAKE_DB))
        for prefix in ("raw_", "spj_"):
            raw = self.checksum(q(prefix + name))
            if lake != raw:
                raise RuntimeError(f"{DB}.{name}: the lake table (count, hash) {lake} differs from the "
                                   f"{prefix}MERGE's {raw}")
        return tier_s, raw_s, spj_s

    def pk_throughput(self, rows: int, warm_rows: int, runs: int) -> list[tuple[float, ...]]:
        """``runs`` times (each on new tables): (load tier, raw, spj, delta tier, raw, spj) seconds."""
        _, _, _, warm_end = self.pk_load("warm_pk", warm_rows, raw=True)
        self.pk_delta("warm_pk", warm_rows, max(10, warm_rows // 10), warm_end)
        self.disable("warm_pk")
        out = []
        for run in range(runs):
            name = f"pk{run}"
            load_tier, load_raw, load_spj, end = self.pk_load(name, rows, raw=True,
                                                              label="2a. primary key, initial load")
            delta_tier, delta_raw, delta_spj = self.pk_delta(name, rows, max(10, rows // 10), end,
                                                             label="2. primary key, delta")
            self.disable(name)
            for prefix in ("raw_", "spj_"):  # each run's 1 M-row copies: memory and disk for the next
                self.spark.sql(f"DROP TABLE IF EXISTS {q(prefix + name)} PURGE")
            out.append((load_tier, load_raw, load_spj, delta_tier, delta_raw, delta_spj))
        return out

    # -- 3. small delta vs lake table size ---------------------------------------------
    def scaling(self, small: int, delta: int, runs: int) -> tuple[list[float], list[float]]:
        sizes = {"pk_1x": small, "pk_10x": 10 * small}
        for name, n in sizes.items():
            self.pk_load(name, n, raw=False)
        times: dict[str, list[float]] = {name: [] for name in sizes}
        for run in range(runs + 1):  # run 0: warm-up
            for name, n in sizes.items():
                first = 1 + run * delta
                self.append(name, first, first + delta, pk_changes(n, first_seq=0))
                seconds = self.tier_expect(name, delta)
                if run:
                    times[name].append(seconds)
                    self.keep(f"3. small delta, {'1×' if name == 'pk_1x' else '10×'}")
        for name in sizes:
            self.disable(name)
        return times["pk_1x"], times["pk_10x"]

    # -- 4. latency -------------------------------------------------------------------
    def latency(self, runs: int, warmup: int = 2) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"empty_log": [], "one_log": [], "empty_pk": [], "one_pk": [], "raw": [],
                                       "insert_log": [], "insert_pk": []}
        self.gateway(f"CREATE TABLE {q('raw_one')} {LOG_COLUMNS} USING iceberg TBLPROPERTIES ('format-version' = '2')")
        inserts = {
            "log": f"INSERT INTO {q('one_log')} (`id`, `name`, `amount`, `ts`) "
                   "VALUES (%(id)s, 'one', 1.0, current_timestamp())",
            "pk": f"INSERT INTO {q('one_pk')} (`id`, `name`, `amount`, `seq`, `_change_type`) "
                  "VALUES (%(id)s, 'one', 1.0, %(id)s, '+I')",
            "raw": f"INSERT INTO {q('raw_one')} (`id`, `name`, `amount`, `ts`) "
                   "VALUES (%(id)s, 'one', 1.0, current_timestamp())",
        }
        counter = iter(range(10**9))
        for kind in ("log", "pk"):
            name = f"one_{kind}"
            self.create_tiered(name, pk=kind == "pk")
            self.gateway(inserts[kind], {"id": next(counter)})
            self.tier_expect(name, 1)  # the first round is not an empty one
            for i in range(warmup + runs):
                seconds, entry = self.tier(name)
                if entry.get("rows"):
                    raise RuntimeError(f"empty round of {DB}.{name} tiered {entry['rows']} rows")
                if i >= warmup:
                    out[f"empty_{kind}"].append(seconds)
                    self.keep(f"4. empty round, {kind}")
            for i in range(warmup + runs):
                time.sleep(1.1)  # untimed: the table is due again (freshness 1 s), as a steady writer finds it
                started = time.perf_counter()
                self.gateway(inserts[kind], {"id": next(counter)})
                inserted = time.perf_counter()
                self.tier_expect(name, 1)  # includes the assigning heartbeat
                if i >= warmup:
                    out[f"one_{kind}"].append(time.perf_counter() - started)
                    out[f"insert_{kind}"].append(inserted - started)
                    self.keep(f"4. one-row round (without the INSERT and heartbeat), {kind}")
            self.disable(name)
        for i in range(warmup + runs):
            seconds = self.timed(lambda: self.gateway(inserts["raw"], {"id": next(counter)}))
            if i >= warmup:
                out["raw"].append(seconds)
        return out


def breakdown(started: float, steps: list[tuple[str, float]], calls: list[tuple[str, float, float]],
              ended: float) -> dict[str, float]:
    """A round's time per step, from the worker's step hook (``run_round``'s
    points) and the times of its heartbeats."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for name, at in steps:
        first.setdefault(name, at)
        last[name] = at

    def in_calls(kind: str, lo: float, hi: float) -> float:
        return sum(e - s for k, s, e in calls if k == kind and lo <= s and e <= hi)

    finish = in_calls("finish", started, ended)
    if not {"after-plan", "during-write", "before-commit", "after-lake-commit"} <= first.keys():
        return {"plan": ended - started - finish, "finishing heartbeat": finish}
    renew = in_calls("renew", last["before-commit"], last["after-lake-commit"])
    return {
        # table properties, plan, schema sync, stale branches, branch creation, views
        "plan": first["after-plan"] - started,
        # the INSERT/MERGE into the branch (for several chunks: all but the last commit)
        "write": last["before-commit"] - first["during-write"],
        "epoch check": renew,
        "fast-forward": last["after-lake-commit"] - last["before-commit"] - renew,
        # maintenance check, scheduling the fresh view's re-pin
        "after the lake commit": ended - last["after-lake-commit"] - finish,
        "finishing heartbeat": finish,
    }


def issue18_fixed_cost(breakdowns: dict[str, list[dict[str, float]]]) -> str:
    """Issue 18's latency lines from the one-row log rounds: the fixed cost (every step but the write; the
    re-pin runs behind the round) and the state-changing (finishing) heartbeat, p50."""
    rounds = breakdowns.get("4. one-row round (without the INSERT and heartbeat), log", [])
    if not rounds:
        return "Issue 18 fixed cost: no one-row log rounds were measured."
    fixed = statistics.median(sum(v for k, v in r.items() if k not in ("write", "re-pin (behind the round)"))
                              for r in rounds)
    finish = statistics.median(r["finishing heartbeat"] for r in rounds if "finishing heartbeat" in r)
    return (f"Issue 18, one-row log round, p50 over {len(rounds)}: fixed cost (all but the write) {fmt_s(fixed)} "
            f"(≤ 0.3 s {'✓' if fixed <= 0.3 else '✗'}); state-changing (finishing) heartbeat {fmt_s(finish)} "
            f"(≤ 0.25 s {'✓' if finish <= 0.25 else '✗'}).")


def fmt_steps(rounds: list[dict[str, float]]) -> str:
    names = list(dict.fromkeys(name for r in rounds for name in r))
    return ", ".join(f"{name} {fmt_s(statistics.median([r[name] for r in rounds if name in r]))}" for name in names)


def pk_changes_initial() -> list[str]:
    return ["`id`", "concat('name-', CAST(`id` AS STRING)) AS `name`", "CAST(`id` AS DOUBLE) AS `amount`",
            "CAST(0 AS BIGINT) AS `seq`", "'+I' AS `_change_type`"]


def fmt_s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def fmt_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f} rows/s ({fmt_s(seconds)})"


def fmt_p(values: list[float]) -> str:
    return f"{fmt_s(statistics.median(values))} p50 ({fmt_s(p(values, 0.95))} p95)"


def verdict(ratio: float, target: float, at_least: bool) -> str:
    ok = ratio >= target if at_least else ratio <= target
    return f"{'≥' if at_least else '≤'} {target:g}× {'✓' if ok else '✗'}"


PHASES = ("1", "2", "3", "4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="N: rows of the throughput phases (default 1000000)")
    parser.add_argument("--runs", type=int, default=10, help="timed rounds of the p50 phases (default 10)")
    parser.add_argument("--pk-runs", type=int, default=3,
                        help="runs of the primary-key phase, each on new tables; medians reported (default 3)")
    parser.add_argument("--delta", type=int, default=1000, help="changes per small delta in phase 3 (default 1000)")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="which phases to run, comma-separated (default 1,2,3,4)")
    add_master_argument(parser)
    args = parser.parse_args()
    phases = {x.strip() for x in args.phases.split(",") if x.strip()}
    if args.rows < 1000 or args.runs < 1 or args.pk_runs < 1:
        parser.error("--rows must be at least 1000, --runs and --pk-runs at least 1")
    if not phases or not phases <= set(PHASES):
        parser.error(f"--phases takes some of {','.join(PHASES)}")

    command = " ".join(["python -m bench.bench_tiering", *map(shlex.quote, sys.argv[1:])])
    print(f"`{command}` (rows={args.rows}, runs={args.runs}, delta={args.delta})", flush=True)
    bench_started = time.perf_counter()
    n, warm = args.rows, max(1000, args.rows // 100)
    small = max(1000, n // 10)
    with spark_master(args.master) as on_master:
        server = start_server(**{"tierlake.tiering.workers": "0", "tierlake.coordinator.interval": "1 h"},
                              **on_master)
        master = server.spark.sparkContext.master
        try:
            bench = Bench(server)
            server.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{DB}`")
            if "1" in phases:
                log_tier, log_raw = bench.log_throughput(n, warm)
                print(f"… phase 1 done ({time.perf_counter() - bench_started:.0f} s)", file=sys.stderr, flush=True)
            if "2" in phases:
                pk_runs = bench.pk_throughput(n, warm, args.pk_runs)
                load_tier, load_raw, load_spj, delta_tier, delta_raw, delta_spj = (
                    statistics.median(column) for column in zip(*pk_runs, strict=True))
                print(f"… phase 2 done ({time.perf_counter() - bench_started:.0f} s)", file=sys.stderr, flush=True)
            if "3" in phases:
                small_t, large_t = bench.scaling(small, args.delta, args.runs)
                print(f"… phase 3 done ({time.perf_counter() - bench_started:.0f} s)", file=sys.stderr, flush=True)
            if "4" in phases:
                # Last, with every statement's code warm; the garbage of the 1 M-row phases (three primary-key
                # runs with their raw copies) collected first: collecting it is not a round's fixed cost.
                server.spark.sparkContext._jvm.System.gc()
                lat = bench.latency(args.runs)
        finally:
            server.stop()
    total = time.perf_counter() - bench_started

    delta = max(10, n // 10)
    cluster = ("a standalone master and one worker on this machine" if args.master == "standalone" else master)
    where = (f"in one process on this machine ({master})" if master.startswith("local")
             else f"on a Spark cluster ({cluster}; one executor of 2 cores, the server its driver)")
    lines = [
        "",
        f"Tiering, {where}; N = {n:,} rows, p50 over {args.runs} runs:",
        "",
        "| measurement | tierlake | raw Spark equivalent | ratio "
        "| target (docs/design.md, 'Performance targets'; issue 18 where it asks more) |",
        "|---|---|---|---|---|",
    ]
    if "1" in phases:
        log_ratio = (n / log_tier) / (n / log_raw)
        lines.append(f"| 1. log table: tier N rows | {fmt_rate(n, log_tier)} | `INSERT INTO … SELECT`: "
                     f"{fmt_rate(n, log_raw)} | {log_ratio:.2f}× | {verdict(log_ratio, 0.9, True)} |")
    if "2" in phases:
        lines += [
            f"| 2. primary key: {delta:,}-change delta into an N-row lake table | {fmt_rate(delta, delta_tier)} "
            f"| hand-written `MERGE`: {fmt_rate(delta, delta_raw)} | {delta_raw / delta_tier:.2f}× "
            f"| {verdict(delta_raw / delta_tier, 0.9, True)}; "
            f"issue 18: {verdict(delta_raw / delta_tier, 0.95, True)} |",
            f"| 2a. primary key: initial load of N rows into the empty lake table | {fmt_rate(n, load_tier)} "
            f"| hand-written `MERGE`: {fmt_rate(n, load_raw)} | {load_raw / load_tier:.2f}× "
            f"| issue 18: {verdict(load_raw / load_tier, 0.9, True)} |",
            f"| 2b. for reference: the raw `MERGE`s of 2 and 2a with tierlake's storage-partitioned-join settings "
            f"(`lake_write.bucketed_merge`) | — | delta {fmt_s(delta_spj)}, initial load {fmt_s(load_spj)} "
            f"| {delta_spj / delta_tier:.2f}×, {load_spj / load_tier:.2f}× | — |",
        ]
    if "3" in phases:
        scale_ratio = statistics.median(large_t) / statistics.median(small_t)
        lines.append(f"| 3. {args.delta:,}-change delta into a {10 * small:,}-row vs a {small:,}-row primary-key "
                     f"lake table | {fmt_p(large_t)} | the same round at 1×: {fmt_p(small_t)} | {scale_ratio:.2f}× "
                     f"| {verdict(scale_ratio, 1.5, False)} |")
    if "4" in phases:
        raw_p50 = statistics.median(lat["raw"])
        for kind, label in (("log", "log table"), ("pk", "primary-key table")):
            empty, one = statistics.median(lat[f"empty_{kind}"]), statistics.median(lat[f"one_{kind}"])
            lines.append(f"| 4. empty round (plan + report), {label} | {fmt_p(lat[f'empty_{kind}'])} | — | — "
                         f"| ≤ 0.5 s {'✓' if empty <= 0.5 else '✗'}; issue 18: ≤ 0.15 s "
                         f"{'✓' if empty <= 0.15 else '✗'} |")
            lines.append(f"| 4. one-row round end to end (gateway `INSERT` + heartbeat + round), {label} "
                         f"| {fmt_p(lat[f'one_{kind}'])} | one-row `INSERT` through the gateway: {fmt_p(lat['raw'])} "
                         f"| {one / raw_p50:.2f}× | ≤ 3 s {'✓' if one <= 3 else '✗'} |")
            lines.append(f"| 4. one-row `INSERT` into the {label}'s stream table through the gateway (of the line "
                         f"above) | {fmt_p(lat[f'insert_{kind}'])} | into a plain Iceberg table: "
                         f"{fmt_p(lat['raw'])} | {statistics.median(lat[f'insert_{kind}']) / raw_p50:.2f}× | — |")
    lines += [
        "",
        "Ratios: 1 = tiering rows/s ÷ raw rows/s; 2 = raw time ÷ tiering time; 3 = time(10×) ÷ time(1×); "
        "4 = tierlake ÷ raw (no target).",
    ]
    if "1" in phases:
        lines.append("Line 1 is a single measurement after a warm-up on a small table.")
    if "2" in phases:
        lines.append(
            f"Lines 2–2b are medians of {args.pk_runs} runs on new tables (each: "
            + "; ".join(f"delta {d:.2f}/{dr:.2f}/{ds:.2f} s, load {lt:.2f}/{lr:.2f}/{ls:.2f} s"
                        for lt, lr, ls, d, dr, ds in pk_runs)
            + " as tierlake/raw/raw with the settings).")
    if phases & {"1", "2"}:
        lines.append("The lake tables of 1–2 were checked against the raw results.")
    if "4" in phases:
        lines += ["", issue18_fixed_cost(bench.breakdowns)]
    lines += [
        "",
        "Where a round's time goes (`Worker.tier` split at `run_round`'s step hooks and the worker's heartbeats; "
        "median per step over the rounds):",
        "",
        *(f"- {label}: {fmt_steps(rounds)}" for label, rounds in bench.breakdowns.items()),
        "",
        f"Total bench time: {total:.0f} s.",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
