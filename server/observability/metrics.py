"""tierlake's Prometheus metrics: one registry per process, served at ``/metrics``.

Two kinds of metric live here:

- **events** (counters and histograms) recorded where they happen: a round
  ends (``server/tiering/worker.py``), a heartbeat is answered, a ``sys``
  commit conflicts, a statement is answered. A ``tierlake tiering-service``
  process records its own rounds and serves them on its own port.
- **per-table gauges** (lag, pending rows, status, lake size) computed at
  scrape time by :class:`TableBook` from values kept in memory: the
  coordinator publishes its state after every commit and the backlog probe
  publishes the pending stream commits and the lake's totals after every
  probe. A scrape therefore runs no Spark job and reads no table; the lag
  it reports is ``now - oldest pending commit``, exactly as
  ``sys.lake_tiering_lag`` computes it.

``METRICS`` documents every metric (``docs/metrics.md`` is generated from it
by ``python -m tierlake.server.observability.docs --write``; the Grafana
dashboard may query only these names).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from tierlake.server.escaping import printable

# The statuses of the coordinator's state machine (server/coordinator/state_machine.py), in its order.
STATUSES = ("New", "Initialized", "Scheduled", "Pending", "Tiering", "Tiered", "Failed")
TABLE = ("database", "table")


@dataclass(frozen=True)
class MetricDoc:
    """One metric as docs/metrics.md describes it (``name`` as exposed: counters end in ``_total``)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    source: str


METRICS: list[MetricDoc] = []
# A ``*_created`` series per counter doubles a scrape's size and no dashboard of ours reads it.
disable_created_metrics()
REGISTRY = CollectorRegistry(auto_describe=True)


def _doc(name: str, kind: str, help: str, labels: Iterable[str], source: str) -> None:
    METRICS.append(MetricDoc(name, kind, help, tuple(labels), source))


def _counter(name: str, help: str, labels: Iterable[str], source: str) -> Counter:
    labels = tuple(labels)
    _doc(f"{name}_total", "counter", help, labels, source)
    return Counter(name, help, labels, registry=REGISTRY)


def _histogram(name: str, help: str, labels: Iterable[str], source: str, buckets: tuple[float, ...]) -> Histogram:
    labels = tuple(labels)
    _doc(name, "histogram", help, labels, source)
    return Histogram(name, help, labels, registry=REGISTRY, buckets=buckets)


# -- per-table gauges (TableBook) ------------------------------------------------
_TABLE_GAUGES = {
    "tierlake_table_lag_seconds": "Seconds since the oldest stream commit the lake does not have yet "
                                  "(0 when caught up), as sys.lake_tiering_lag computes it",
    "tierlake_table_freshness_seconds": "The table's target freshness (table.datalake.freshness) in seconds",
    "tierlake_table_pending_rows": "Rows the stream has committed after the tiered position",
    "tierlake_table_pending_bytes": "Bytes of data files the stream has committed after the tiered position",
    "tierlake_table_status": "1 for the table's coordinator status, 0 for every other status "
                             "(one series per status)",
    "tierlake_table_consecutive_failures": "Rounds of the table that failed in a row (0 after a round tiers)",
    "tierlake_lake_files": "Data files in the lake table's current snapshot",
    "tierlake_lake_bytes": "Bytes of data files in the lake table's current snapshot",
}
for _name, _help in _TABLE_GAUGES.items():
    _doc(_name, "gauge", _help, TABLE + (("status",) if _name == "tierlake_table_status" else ()),
         "server (coordinator state and backlog probe)")
_doc("tierlake_tables", "gauge", "Tables registered for tiering", (), "server (coordinator state)")

# -- events -------------------------------------------------------------------------
# A round takes from well under a second (a small append) to its max duration (minutes).
_ROUND_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ROUND_DURATION = _histogram("tierlake_round_duration_seconds", "Duration of tiering rounds that tiered",
                            TABLE, "tiering process (server or tiering-service)", _ROUND_BUCKETS)
ROUND_ROWS = _counter("tierlake_round_rows", "Rows tiered into the lake", TABLE,
                      "tiering process (server or tiering-service)")
ROUND_BYTES = _counter("tierlake_round_bytes", "Bytes of data files tiered into the lake", TABLE,
                       "tiering process (server or tiering-service)")
ROUNDS = _counter("tierlake_rounds", "Tiering rounds that ended, by outcome (tiered, failed, fenced)",
                  TABLE + ("outcome",), "tiering process (server or tiering-service)")
ROUND_FAILURES = _counter("tierlake_round_failures", "Tiering rounds that failed (reported as Failed)", TABLE,
                          "tiering process (server or tiering-service)")
HEARTBEAT_DURATION = _histogram(
    "tierlake_heartbeat_duration_seconds", "Time the coordinator took to answer a CALL sys.heartbeat "
    "(one group commit of sys.tiering_tables)", (), "server",
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))
COMMIT_CONFLICTS = _counter("tierlake_commit_conflicts", "Iceberg commits of sys state tables that conflicted "
                            "with another commit and were retried", TABLE, "server")
MAINTENANCE_RUNS = _counter("tierlake_maintenance_runs", "Managed maintenance actions (compaction, snapshot "
                            "expiry, orphan files) by kind and outcome (ok, error)",
                            TABLE + ("kind", "outcome"), "tiering process (server or tiering-service)")
GATEWAY_STATEMENTS = _counter(
    "tierlake_gateway_statements", "Statements the gateway received, by kind (local: answered by the gateway — "
    "CALL, sys reads, tiered DDL, stream INSERTs; relayed: run by Spark; unrouted: refused by authorisation "
    "before either) and outcome (ok, error, denied; a relayed statement's as its ExecuteStatement reply says)",
    ("kind", "outcome"), "server")
GATEWAY_AUTH_FAILURES = _counter("tierlake_gateway_auth_failures", "Logins refused (wrong user name or password), "
                                 "by interface (thrift: the gateway, http: this port)", ("interface",), "server")
INGEST_ACKNOWLEDGED = _counter("tierlake_ingest_acknowledged", "INSERT statements into stream tables answered "
                               "after their group commit landed", TABLE, "server")
_doc("tierlake_gateway_sessions", "gauge", "Client sessions open on the gateway", (), "server")

_SESSIONS = Gauge("tierlake_gateway_sessions", "Client sessions open on the gateway", registry=REGISTRY)


_SESSION_COUNTS: list[Callable[[], int]] = []


def watch_sessions(count: Callable[[], int]) -> None:
    """The composition root tells the sessions gauge how to count (read at scrape time). A process
    can start more than one server (a restart in place, the tests), and the gauge is their sum: each
    count answers 0 once its gateway stopped, where replacing the function lost the live one's."""
    _SESSION_COUNTS.append(count)
    _SESSIONS.set_function(lambda: sum(c() for c in list(_SESSION_COUNTS)))


def split_path(path: Any) -> tuple[str, str]:
    """``(database, table)`` of a ``db.table`` text or a TablePath."""
    database = getattr(path, "database", None)
    if database is not None:
        return printable(database), printable(path.table)
    database, _, table = str(path).partition(".")
    return printable(database), printable(table)


# -- the per-table book -------------------------------------------------------------
@dataclass
class TableEntry:
    """What the book knows about one registered table."""

    table_id: int
    database: str
    table: str
    status: str | None = None
    freshness_s: float = 0.0
    tiered_position: int = 0
    last_error: str | None = None
    last_error_time: datetime | None = None
    last_tiered_time: datetime | None = None
    failure_count: int = 0
    job_id: str | None = None
    next_due: datetime | None = None
    # (log position, commit time, rows, bytes) of stream commits after the tiered position, as last probed.
    pending: tuple[tuple[int, datetime, int, int], ...] = ()
    lake_files: int | None = None
    lake_bytes: int | None = None

    def lag(self, now: datetime) -> tuple[float, int, int]:
        """``(lag seconds, pending rows, pending bytes)`` against the tiered position as known now."""
        waiting = [c for c in self.pending if c[0] > self.tiered_position]
        if not waiting:
            return 0.0, 0, 0
        oldest = min(c[1] for c in waiting)
        return (max(0.0, (now - oldest).total_seconds()), sum(c[2] for c in waiting),
                sum(c[3] for c in waiting))


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)  # state rows are UTC
    return value


class TableBook:
    """Per-table values kept in memory, published by their owners, read by scrapes and the status page."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[int, TableEntry] = {}
        self.published = False  # True once the coordinator published (tiering-service processes never do)

    def publish_states(self, states: Iterable[Any]) -> None:
        """The coordinator's state after a commit (TableState values); tables not in it are forgotten."""
        fresh: dict[int, TableEntry] = {}
        for s in states:
            try:
                freshness = s.freshness.total_seconds()
            except Exception:  # noqa: BLE001 - a bad property is the coordinator's to report, not the scrape's
                freshness = 0.0
            fresh[s.table_id] = TableEntry(
                s.table_id, s.database_name, s.table_name, s.status.value if s.status else None, freshness,
                s.tiered_position or 0, s.last_error, _aware(s.last_error_time), _aware(s.last_tiered_time),
                s.failure_count or 0, s.job_id, _aware(s.next_due))
        with self._lock:
            for table_id, entry in fresh.items():
                old = self._tables.get(table_id)
                if old is not None:
                    entry.pending, entry.lake_files, entry.lake_bytes = old.pending, old.lake_files, old.lake_bytes
            self._tables = fresh
            self.published = True

    def publish_backlog(self, table_id: int, commits: Iterable[dict[str, Any]], lake_files: int | None = None,
                        lake_bytes: int | None = None) -> None:
        """The backlog probe's pending stream commits of one table (and its lake's totals)."""
        pending = tuple(sorted((int(c["log_position"]), _aware(c["committed_at"]), int(c["record_count"]),
                                int(c["file_bytes"])) for c in commits))
        with self._lock:
            entry = self._tables.get(table_id)
            if entry is None:
                return
            entry.pending = pending
            if lake_files is not None:
                entry.lake_files, entry.lake_bytes = lake_files, lake_bytes

    def entries(self) -> list[TableEntry]:
        """Copies of every table's entry, by database and table name."""
        with self._lock:
            out = [TableEntry(**vars(e)) for e in self._tables.values()]
        return sorted(out, key=lambda e: (e.database, e.table))

    def collect(self):
        """prometheus_client's collector protocol: the per-table gauges, computed now."""
        families = {name: GaugeMetricFamily(name, help, labels=list(TABLE) + (
            ["status"] if name == "tierlake_table_status" else [])) for name, help in _TABLE_GAUGES.items()}
        now = datetime.now(timezone.utc)
        entries = self.entries()
        for e in entries:
            labels = [printable(e.database), printable(e.table)]  # names a client chose (server/escaping.py)
            lag, rows, size = e.lag(now)
            families["tierlake_table_lag_seconds"].add_metric(labels, lag)
            families["tierlake_table_freshness_seconds"].add_metric(labels, e.freshness_s)
            families["tierlake_table_pending_rows"].add_metric(labels, rows)
            families["tierlake_table_pending_bytes"].add_metric(labels, size)
            families["tierlake_table_consecutive_failures"].add_metric(labels, e.failure_count)
            for status in STATUSES:
                families["tierlake_table_status"].add_metric(labels + [status], 1.0 if e.status == status else 0.0)
            if e.lake_files is not None:
                families["tierlake_lake_files"].add_metric(labels, e.lake_files)
                families["tierlake_lake_bytes"].add_metric(labels, e.lake_bytes or 0)
        yield from families.values()
        count = GaugeMetricFamily("tierlake_tables", "Tables registered for tiering")
        count.add_metric([], len(entries))
        yield count

    def describe(self):
        # Without it the registry would call collect() once at registration, before any state exists.
        return []


TABLES = TableBook()
REGISTRY.register(TABLES)


# -- recording helpers (one line at each call site) ------------------------------
def round_tiered(path: Any, rows: int, size: int, seconds: float) -> None:
    """A round that tiered (finished or force-finished)."""
    labels = split_path(path)
    ROUND_DURATION.labels(*labels).observe(seconds)
    ROUND_ROWS.labels(*labels).inc(rows)
    ROUND_BYTES.labels(*labels).inc(size)
    ROUNDS.labels(*labels, "tiered").inc()


def round_failed(path: Any) -> None:
    """A round reported as failed to the coordinator."""
    labels = split_path(path)
    ROUND_FAILURES.labels(*labels).inc()
    ROUNDS.labels(*labels, "failed").inc()


def round_fenced(path: Any) -> None:
    """A round whose table was no longer this job's (disabled, timed out, re-assigned)."""
    ROUNDS.labels(*split_path(path), "fenced").inc()


def maintenance_ran(path: Any, actions: Iterable[Any]) -> None:
    """Managed maintenance actions of a table (``kind``, ``error`` attributes)."""
    labels = split_path(path)
    for action in actions:
        MAINTENANCE_RUNS.labels(*labels, str(action.kind), "error" if action.error else "ok").inc()


def commit_conflict(table_name: str) -> None:
    """A conflicting commit of a ``sys`` state table, retried."""
    COMMIT_CONFLICTS.labels(*split_path(table_name)).inc()


def statement(kind: str, outcome: str) -> None:
    """A statement the gateway received: kind ``local``/``relayed``, outcome ``ok``/``error``/``denied``."""
    GATEWAY_STATEMENTS.labels(kind, outcome).inc()


def auth_failure(interface: str) -> None:
    """A refused login: ``thrift`` (the gateway) or ``http`` (the status page and /metrics)."""
    GATEWAY_AUTH_FAILURES.labels(interface).inc()


def ingest_acknowledged(path: Any) -> None:
    """An INSERT into a stream table answered after its commit landed."""
    INGEST_ACKNOWLEDGED.labels(*split_path(path)).inc()


class Timer:
    """``with Timer() as t:`` … ``t.seconds``: monotonic, for histograms."""

    def __enter__(self) -> Timer:
        self.started = time.monotonic()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.monotonic() - self.started


def exposition() -> bytes:
    """The registry in Prometheus text format (what ``/metrics`` answers)."""
    return generate_latest(REGISTRY)
