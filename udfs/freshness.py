"""How far a tiered table is behind its freshness target, for dashboards."""

from __future__ import annotations

import time
from datetime import datetime

from tierlake.server.config.durations import parse_duration
from tierlake.server.sqlapi.functions import functions


def freshness_lag(last_tiered_time: datetime | None, freshness: str | None, now: float | None = None) -> float | None:
    """The logic of :func:`tierlake_freshness_lag`, with ``now`` (epoch seconds) injectable."""
    if last_tiered_time is None or freshness is None:
        return None
    target = parse_duration(freshness, "tierlake_freshness_lag").total_seconds()
    # pyspark hands TIMESTAMP values over as naive local datetimes, which
    # timestamp() reads as local time again: the round trip is exact.
    age = (time.time() if now is None else now) - last_tiered_time.timestamp()
    return max(0.0, age - target)


# Declared deterministic although it reads the clock: Spark refuses
# non-deterministic expressions inside aggregates, and ``max(lag)`` over all
# tables is what a dashboard asks for. Python UDFs are never constant-folded,
# so each evaluation still sees the current time.
@functions.udf(returns="double")
def tierlake_freshness_lag(last_tiered_time: datetime | None, freshness: str | None) -> float | None:
    """Seconds a table is behind its freshness target: 0.0 while it is fresh.

    The age of the last tiered round minus the freshness (Fluss-style, e.g.
    ``'1 min'``), never below zero: ``WHERE tierlake_freshness_lag(...) > 0``
    lists the late tables, the value says by how much. Combine
    ``sys.lake_tiering_status.last_tiered_time`` with the table's
    ``table.datalake.freshness`` property. It compares with the clock when
    evaluated.

    Args:
      last_tiered_time: end of the last successful tiering round; NULL (never tiered) gives NULL.
      freshness: the freshness target as a duration such as ``'1 min'``; NULL gives NULL.
    """
    return freshness_lag(last_tiered_time, freshness)
