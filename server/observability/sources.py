"""What the server's status page reads, wired by the composition root.

The table list and the round history come from memory (the coordinator's
published state, ``SmallTable``'s rows of ``sys.tiering_round_log``); the
per-table maintenance and quality sections query their ``sys`` views with
named parameters (``sql/queries/status_*.sql``): only a table's own page
runs them, never a scrape of ``/metrics``.
"""

from __future__ import annotations

from typing import Any

from tierlake import sql
from tierlake.server.observability import metrics
from tierlake.server.observability.status_page import StatusSource

Q_MAINTENANCE = "queries/status_maintenance.sql"
Q_QUALITY = "queries/status_quality.sql"


def _query(spark: Any, path: str, database: str, table: str) -> list[dict[str, Any]]:
    return [row.asDict() for row in spark.sql(sql.read(path), args={"database": database, "table": table}).collect()]


def server_source(spark: Any, rounds_table: Any, extra: dict[str, str] | None = None) -> StatusSource:
    """The server's page: ``rounds_table`` is the coordinator's ``SmallTable`` of the round history."""
    return StatusSource(
        tables=metrics.TABLES.entries,
        rounds=lambda: rounds_table.load()[1],
        maintenance=lambda database, table: _query(spark, Q_MAINTENANCE, database, table),
        quality=lambda database, table: _query(spark, Q_QUALITY, database, table),
        extra=extra or {},
    )
