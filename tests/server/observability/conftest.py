"""Helpers for the observability tests: scraping the real server's /metrics."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(server) -> dict[tuple[str, tuple], float]:
    """One scrape of the server's ``/metrics``: ``(sample name, sorted labels) → value``."""
    with urllib.request.urlopen(server.http.url + "metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def table_labels(database: str, table: str, **more: str) -> tuple:
    return tuple(sorted({"database": database, "table": table, **more}.items()))


def value(samples: dict, name: str, database: str, table: str, **more: str) -> float:
    """A per-table sample's value; 0 when the series does not exist yet (a counter never incremented)."""
    return samples.get((name, table_labels(database, table, **more)), 0.0)


def spark_jobs(spark) -> int:
    """Every Spark job this application has submitted so far (the DAG scheduler's job id counter), checked
    against the status tracker: the jobs it knows without a job group are the ones an HTTP thread would run."""
    sc = spark.sparkContext
    counter = sc._jsc.sc().dagScheduler().nextJobId()  # an AtomicInteger, which py4j hands over as its int
    total = int(counter if isinstance(counter, int) else counter.get())
    ungrouped = sc.statusTracker().getJobIdsForGroup(None)
    assert all(job_id < total for job_id in ungrouped)
    return total
