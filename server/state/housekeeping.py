"""Bounded ``sys`` state: the server's housekeeping of its own tables.

Every coordinator change is an Iceberg commit of a small ``sys`` table, and
each commit writes a new ``metadata.json`` listing every snapshot: left
alone, the files and the size of each metadata file grow with every
heartbeat. What bounds each table (docs/tiering.md, "Bounded state"):

- metadata files: ``write.metadata.delete-after-commit.enabled`` with 5
  previous versions (migration 0009, and here for tables of later ones);
- snapshots: the newest ``tierlake.sys.snapshots-retained`` are kept, older
  ones expired with the files only they referenced: every
  ``tierlake.sys.housekeeping-interval``, and at once for a table that made
  :data:`COMMITS_BEFORE_EXPIRY` commits since its last expiry
  (:func:`note_commit`, called by ``SmallTable``);
- rows: round history, quality results and maintenance runs older than
  ``tierlake.history.retention`` are deleted, jobs silent for
  ``tierlake.tiering.job-retention`` forgotten, request ids of expired
  stream snapshots (``sys.write_requests``) older than
  ``tierlake.write.request-id-retention`` deleted;
- files of the append-only history tables: compacted past
  :data:`HISTORY_MAX_FILES` data files, checked every pass and at once after
  :data:`HISTORY_MAX_FILES` commits of one of them since its last check
  (each append adds a file: a timer alone lets the count reach whatever the
  commit rate allows in one interval); orphan files (older than
  :data:`ORPHAN_MIN_AGE_MS`) removed every :data:`SLOW_EVERY` passes.

A failure is logged and retried at the next pass; it never touches the
coordinator's own commits (expiry keeps the newest snapshots, which any
commit in flight was based on).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from tierlake import sql
from tierlake.server.runtime import iceberg_actions as im
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.state import migrations, state_version

log = logging.getLogger("tierlake.housekeeping")

T_DELETE_OLDER_THAN = "templates/delete_older_than.sql.j2"
COMMITS_BEFORE_EXPIRY = 50
HISTORY_MAX_FILES = 16
SLOW_EVERY = 10
ORPHAN_MIN_AGE_MS = 3600 * 1000
# Append-only history tables: (timestamp column, setting that bounds its age).
RETENTION = {
    "sys.tiering_round_log": ("ended_at", "tierlake.history.retention"),
    "sys.quality_results": ("run_time", "tierlake.history.retention"),
    "sys.lake_maintenance_log": ("started_at", "tierlake.history.retention"),
    "sys.tiering_jobs": ("last_heartbeat", "tierlake.tiering.job-retention"),
    "sys.write_requests": ("committed_at", "tierlake.write.request-id-retention"),
}
# Retention applied at every pass, not every SLOW_EVERY-th: rows come at the write rate.
EVERY_PASS_RETENTION = ("sys.write_requests",)
HISTORY_TABLES = ("sys.tiering_round_log", "sys.quality_results", "sys.lake_maintenance_log", "sys.write_requests")
_CREATE = re.compile(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(sys\.\w+)", re.IGNORECASE)

class CommitCounts:
    """Commits of ``sys`` tables since their last expiry and file check, and the
    event that wakes the housekeeping for them. One per process
    (:data:`_counts`); tests make their own, since a server's housekeeper in
    the same process takes from the process's."""

    def __init__(self) -> None:
        self.commits: dict[str, int] = {}
        self.appends: dict[str, int] = {}
        self.lock = threading.Lock()
        self.pressure = threading.Event()
        self.total = 0
        self.totals: dict[str, int] = {}

    def note(self, name: str) -> None:
        with self.lock:
            self.total += 1
            self.totals[name] = self.totals.get(name, 0) + 1
            self.commits[name] = self.commits.get(name, 0) + 1
            if name in HISTORY_TABLES:
                self.appends[name] = self.appends.get(name, 0) + 1
                if self.appends[name] >= HISTORY_MAX_FILES:
                    self.pressure.set()
            if self.commits[name] >= COMMITS_BEFORE_EXPIRY:
                self.pressure.set()

    def take_pressured(self) -> set[str]:
        """Tables whose snapshots are due for expiry (their commit counts restart)."""
        with self.lock:
            names = {n for n, c in self.commits.items() if c >= COMMITS_BEFORE_EXPIRY}
            for name in names:
                self.commits[name] = 0
            if not any(c >= HISTORY_MAX_FILES for c in self.appends.values()):
                self.pressure.clear()
            return names

    def take_appended(self, every: bool = False) -> list[str]:
        """History tables due for a file-count check: those that made
        :data:`HISTORY_MAX_FILES` commits since their last one (all if ``every``)."""
        with self.lock:
            names = [n for n in HISTORY_TABLES if every or self.appends.get(n, 0) >= HISTORY_MAX_FILES]
            for name in names:
                self.appends[name] = 0
            if not any(c >= COMMITS_BEFORE_EXPIRY for c in self.commits.values()):
                self.pressure.clear()
            return names


_counts = CommitCounts()


def commits_total(name: str | None = None) -> int:
    """``sys`` commits made through ``SmallTable`` by this process, of table
    ``name`` or of all (logs, tests, benchmarks)."""
    return _counts.total if name is None else _counts.totals.get(name, 0)


def note_commit(name: str) -> None:
    """A ``sys`` table committed; enough commits wake the housekeeping early."""
    _counts.note(name)


def state_tables() -> list[str]:
    """The ``sys`` tables the migrations create (KV tables keep their own retention)."""
    names: list[str] = []
    for migration in migrations.available():
        for name in _CREATE.findall(migration.text):
            if name.lower() not in names:
                names.append(name.lower())
    return names


class Housekeeper(threading.Thread):
    """The server's thread that keeps every ``sys`` state table bounded."""

    def __init__(self, spark: Any, config: Any):
        super().__init__(name="tierlake-housekeeping", daemon=True)
        self.spark, self.config = spark, config
        self.interval = config.duration("tierlake.sys.housekeeping-interval")
        self.keep = config.int("tierlake.sys.snapshots-retained")
        self.stop_event = threading.Event()
        self.passes = 0
        self.tables = state_tables()

    def existing(self) -> list[str]:
        return [t for t in self.tables if self.spark.catalog.tableExists(t)]

    def until_stopped(self, names: Any) -> Any:
        """``names`` one by one until the server stops: a stop waits for one table's action, not for a
        whole pass (a first pass over every table took 15 to 60 s on a loaded machine, and every stop
        while it ran waited for its end). What a pass cut short skipped, the next one does."""
        for name in names:
            if self.stop_event.is_set():
                return
            yield name

    def bound_metadata(self) -> list[str]:
        """Metadata properties on every state table (tables of later migrations)."""
        changed = []
        for name in self.until_stopped(self.existing()):
            try:
                if im.bound_metadata(iceberg_table(self.spark, name)):
                    changed.append(name)
            except Exception:
                log.warning("could not set metadata properties of %s", name, exc_info=True)
        return changed

    def expire(self, names: list[str] | None = None) -> dict[str, int]:
        now_ms = int(time.time() * 1000)
        out = {}
        for name in self.until_stopped(names if names is not None else self.existing()):
            try:
                out[name] = im.expire_snapshots(self.spark, iceberg_table(self.spark, name), now_ms, self.keep)
            except Exception:
                log.warning("expiring snapshots of %s failed", name, exc_info=True)
        return out

    def apply_retention(self, now: datetime | None = None, names: tuple[str, ...] | None = None) -> dict[str, int]:
        """Delete history rows past their retention (of ``names``, default all);
        returns rows deleted per table."""
        now = now or datetime.now(timezone.utc)
        out = {}
        for name, (column, key) in self.until_stopped(RETENTION.items()):
            if names is not None and name not in names:
                continue
            age: timedelta = self.config.duration(key)
            if not self.spark.catalog.tableExists(name) or age.total_seconds() <= 0:
                continue
            cutoff = now - age
            try:
                from pyspark.sql import functions as F

                old = self.spark.table(name).where(F.col(column) < F.lit(cutoff)).count()
                if old:
                    # A DELETE that matches nothing would still commit: count first.
                    self.spark.sql(sql.render(T_DELETE_OLDER_THAN, table=name.split("."), column=column),
                                   args={"cutoff": cutoff})
                    state_version.bump()  # cached sys reads must not show the deleted history
                    out[name] = old
            except Exception:
                log.warning("history retention of %s failed", name, exc_info=True)
        return out

    def compact_history(self, names: list[str] | None = None) -> dict[str, int]:
        out = {}
        for name in self.until_stopped(HISTORY_TABLES if names is None else names):
            try:
                if not self.spark.catalog.tableExists(name):
                    continue
                table = iceberg_table(self.spark, name)
                files, deletes = im.data_file_counts(table)
                if files > HISTORY_MAX_FILES or deletes:
                    done = im.compact(self.spark, table, {"min-input-files": "2", "delete-file-threshold": "1",
                                                         "rewrite-all": "true"})
                    out[name] = done.files_rewritten
            except Exception:
                log.warning("compacting %s failed", name, exc_info=True)
        return out

    def remove_orphans(self) -> dict[str, int]:
        cutoff = int(time.time() * 1000) - ORPHAN_MIN_AGE_MS
        out = {}
        for name in self.until_stopped(self.existing()):
            try:
                removed = im.remove_orphans(self.spark, iceberg_table(self.spark, name), cutoff)
                if removed:
                    out[name] = removed
            except Exception:
                log.warning("removing orphan files of %s failed", name, exc_info=True)
        return out

    def run_pass(self, slow: bool | None = None) -> dict[str, Any]:
        """One pass; ``slow`` (default: every :data:`SLOW_EVERY`-th pass) adds
        the history retention of every table (:data:`EVERY_PASS_RETENTION`'s
        every pass) and orphan removal."""
        self.passes += 1
        slow = (self.passes % SLOW_EVERY == 1) if slow is None else slow
        done: dict[str, Any] = {}
        done["retention"] = self.apply_retention(names=None if slow else EVERY_PASS_RETENTION)
        done["compacted"] = self.compact_history(_counts.take_appended(every=True))
        _counts.take_pressured()
        done["expired"] = {k: v for k, v in self.expire().items() if v}
        if slow:
            done["orphans"] = self.remove_orphans()
        if any(done.values()):
            log.info("sys housekeeping: %s", {k: v for k, v in done.items() if v})
        return done

    def run(self) -> None:
        self.bound_metadata()
        next_pass = time.monotonic()
        while not self.stop_event.is_set():
            if time.monotonic() >= next_pass:
                try:
                    self.run_pass()
                except Exception:
                    log.exception("sys housekeeping failed")
                next_pass = time.monotonic() + self.interval.total_seconds()
            elif _counts.pressure.wait(min(1.0, max(0.0, next_pass - time.monotonic()))):
                # A table made many commits since its last expiry or file check: just those now.
                compacted = self.compact_history(_counts.take_appended())
                if compacted:
                    log.info("sys housekeeping: compacted %s", compacted)
                self.expire(sorted(_counts.take_pressured()))

    def stop(self) -> None:
        self.stop_event.set()
        _counts.pressure.set()
        if self.is_alive():
            self.join(timeout=60)
