"""The metric registry, its generated docs, the Grafana dashboard and the per-table book, without a JVM."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tierlake.server.observability import docs, metrics
from tierlake.server.observability.metrics import METRICS, TableBook

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
# What the issue asks for, at least.
REQUIRED = {
    "tierlake_table_lag_seconds", "tierlake_table_freshness_seconds", "tierlake_table_pending_rows",
    "tierlake_table_pending_bytes", "tierlake_table_status", "tierlake_round_duration_seconds",
    "tierlake_round_rows_total", "tierlake_round_failures_total", "tierlake_lake_files", "tierlake_lake_bytes",
    "tierlake_heartbeat_duration_seconds", "tierlake_commit_conflicts_total", "tierlake_maintenance_runs_total",
    "tierlake_gateway_sessions", "tierlake_gateway_statements_total", "tierlake_gateway_auth_failures_total",
    "tierlake_ingest_acknowledged_total",
}


@dataclass
class FakeState:
    """The attributes of a coordinator TableState the book reads."""

    table_id: int
    database_name: str
    table_name: str
    status: object
    tiered_position: int = 0
    last_error: str | None = None
    properties: dict = field(default_factory=dict)
    failure_count: int = 0
    job_id: str | None = None
    last_error_time: datetime | None = None
    last_tiered_time: datetime | None = None
    next_due: datetime | None = None
    freshness: timedelta = timedelta(seconds=30)


class _Status:
    def __init__(self, value):
        self.value = value


def scrape(registry_text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(registry_text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_every_metric_the_issue_names_is_registered_with_help():
    names = {m.name for m in METRICS}
    assert REQUIRED <= names, REQUIRED - names
    for m in METRICS:
        assert re.fullmatch(r"tierlake_[a-z_]+", m.name), m.name
        assert len(m.help) > 20, m
        if m.name.startswith(("tierlake_table_", "tierlake_round_", "tierlake_lake_")):
            assert m.labels[:2] == ("database", "table"), m


def test_the_exposition_has_help_for_every_family_and_only_documented_ones():
    text = metrics.exposition().decode()
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    documented = {m.name for m in METRICS}
    # Every documented metric is served (the per-table ones with no series until a table exists), nothing else.
    assert helps == documented, (helps - documented, documented - helps)
    assert "_created" not in text


def test_metrics_md_is_generated_from_the_registry():
    # Fails when a metric is added or its help changes without `python -m tierlake.server.observability.docs --write`.
    assert (ROOT / "docs" / "metrics.md").read_text() == docs.render()
    for m in METRICS:
        assert f"| `{m.name}` |" in docs.render()


PROMQL = {"histogram_quantile", "sum", "rate", "increase", "count", "vector", "by", "without", "or", "and",
          "unless", "avg", "max", "min", "topk", "on", "ignoring"}
HISTOGRAMS = {m.name for m in METRICS if m.kind == "histogram"}


def queried_metrics(dashboard: dict) -> set[str]:
    """Every metric name a dashboard's PromQL queries (a histogram's ``_bucket``, ``_sum``, ``_count``: the
    histogram)."""
    names = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(by|without|on|ignoring)\s*\([^)]*\)", " ", target["expr"])
            for token in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
                if token in PROMQL:
                    continue
                stem = re.sub(r"_(bucket|sum|count)$", "", token)
                names.add(stem if stem in HISTOGRAMS else token)
    return names


def test_the_grafana_dashboard_queries_only_registered_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    queried = queried_metrics(dashboard)
    registered = {m.name for m in METRICS}
    assert queried, "no query found: the extraction is broken"
    assert queried <= registered, f"the dashboard queries metrics that do not exist: {sorted(queried - registered)}"
    # The dashboard shows the headline metrics.
    assert {"tierlake_table_lag_seconds", "tierlake_table_status", "tierlake_round_failures_total",
            "tierlake_round_duration_seconds"} <= queried


def test_the_dashboard_check_catches_an_unknown_metric():
    dashboard = {"panels": [{"targets": [{"expr": "rate(tierlake_round_rowz_total[5m])"},
                                         {"expr": "histogram_quantile(0.9, sum by (le) "
                                                  "(rate(tierlake_round_duration_seconds_bucket[5m])))"},
                                         {"expr": "process_cpu_seconds_total"}]}]}
    queried = queried_metrics(dashboard)
    assert queried == {"tierlake_round_rowz_total", "tierlake_round_duration_seconds", "process_cpu_seconds_total"}
    assert queried - {m.name for m in METRICS} == {"tierlake_round_rowz_total", "process_cpu_seconds_total"}


def test_the_book_computes_lag_and_pending_from_what_was_published():
    book = TableBook()
    now = datetime.now(timezone.utc)
    book.publish_states([
        FakeState(1, "shop", "orders", _Status("Scheduled"), tiered_position=3),
        FakeState(2, "shop", "bad", _Status("Failed"), last_error="boom", failure_count=2),
    ])
    book.publish_backlog(1, [
        {"log_position": 3, "committed_at": now - timedelta(seconds=500), "record_count": 7, "file_bytes": 70},
        {"log_position": 4, "committed_at": now - timedelta(seconds=100), "record_count": 5, "file_bytes": 50},
        {"log_position": 5, "committed_at": now - timedelta(seconds=10), "record_count": 1, "file_bytes": 10},
    ], lake_files=4, lake_bytes=4000)
    values = scrape("".join(_families_text(book)))
    orders = (("database", "shop"), ("table", "orders"))
    # Position 3 is tiered: the oldest pending commit is position 4's, 100 s old.
    assert 100 <= values[("tierlake_table_lag_seconds", orders)] < 110
    assert values[("tierlake_table_pending_rows", orders)] == 6
    assert values[("tierlake_table_pending_bytes", orders)] == 60
    assert values[("tierlake_table_freshness_seconds", orders)] == 30
    assert values[("tierlake_lake_files", orders)] == 4
    bad = (("database", "shop"), ("status", "Failed"), ("table", "bad"))
    assert values[("tierlake_table_status", bad)] == 1
    assert values[("tierlake_table_status", (("database", "shop"), ("status", "Tiered"), ("table", "bad")))] == 0
    assert values[("tierlake_table_consecutive_failures", (("database", "shop"), ("table", "bad")))] == 2
    # A round that tiers up to position 5 leaves nothing pending: the coordinator's state moves, the probe need not.
    book.publish_states([FakeState(1, "shop", "orders", _Status("Scheduled"), tiered_position=5)])
    values = scrape("".join(_families_text(book)))
    assert values[("tierlake_table_lag_seconds", orders)] == 0
    assert values[("tierlake_table_pending_rows", orders)] == 0
    assert ("tierlake_table_status", bad) not in values  # forgotten once the coordinator no longer has it
    assert values[("tierlake_tables", ())] == 1


def _families_text(book: TableBook):
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    registry = CollectorRegistry()
    registry.register(book)
    yield generate_latest(registry).decode()
