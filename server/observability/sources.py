"""What the server's status page reads, wired by the composition root.

The table list and the round history come from memory (the coordinator's
published state, ``SmallTable``'s rows of ``sys.tiering_round_log``); the
per-table maintenance and quality sections query their ``sys`` views with
named parameters (``sql/queries/status_*.sql``): only a table's own page
runs them, never a scrape of ``/metrics``, one at a time and at most once per
table and ten seconds (:class:`PageQueries`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tierlake import sql
from tierlake.server.observability import metrics
from tierlake.server.observability.status_page import StatusSource

Q_MAINTENANCE = "queries/status_maintenance.sql"
Q_QUALITY = "queries/status_quality.sql"


# A table page's sys queries are answered from what the last load read, for this long: 64 parallel loads
# of /table ran 128 Spark queries on the server's session and raised an admin's login to 7.3 s (issue 51).
PAGE_QUERY_MAX_AGE_S = 10.0


class PageQueries:
    """The status page's Spark queries, bounded: one at a time for the whole
    HTTP door, and each (query, table) answered from memory for
    :data:`PAGE_QUERY_MAX_AGE_S` after it ran — concurrent loads of one page
    wait for the one query running and share its rows."""

    def __init__(self, spark: Any, max_age_s: float = PAGE_QUERY_MAX_AGE_S, clock: Any = time.monotonic):
        self.spark, self.max_age_s, self.clock = spark, max_age_s, clock
        self._running = threading.Lock()  # one Spark query of the status page at a time
        self._rows: dict[tuple[str, str, str], tuple[float, list[dict[str, Any]]]] = {}
        self.queries = 0

    def __call__(self, path: str, database: str, table: str) -> list[dict[str, Any]]:
        key = (path, database, table)
        cached = self._rows.get(key)
        if cached is not None and self.clock() - cached[0] < self.max_age_s:
            return cached[1]
        with self._running:
            cached = self._rows.get(key)  # another load may have read it while this one waited
            if cached is not None and self.clock() - cached[0] < self.max_age_s:
                return cached[1]
            rows = self.run(path, database, table)
            self.queries += 1
            now = self.clock()
            self._rows = {k: v for k, v in self._rows.items() if now - v[0] < self.max_age_s}
            self._rows[key] = (now, rows)
            return rows

    def run(self, path: str, database: str, table: str) -> list[dict[str, Any]]:
        return [row.asDict() for row in
                self.spark.sql(sql.read(path), args={"database": database, "table": table}).collect()]


def server_source(spark: Any, rounds_table: Any, extra: dict[str, str] | None = None) -> StatusSource:
    """The server's page: ``rounds_table`` is the coordinator's ``SmallTable`` of the round history."""
    queries = PageQueries(spark)
    return StatusSource(
        tables=metrics.TABLES.entries,
        rounds=lambda: rounds_table.load()[1],
        maintenance=lambda database, table: queries(Q_MAINTENANCE, database, table),
        quality=lambda database, table: queries(Q_QUALITY, database, table),
        extra=extra or {},
    )
