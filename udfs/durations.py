"""Fluss-style durations in SQL: ``'1 min'`` → 60.0 seconds.

Spark's interval syntax wants ``INTERVAL 1 MINUTE``; table properties such as
``table.datalake.freshness`` and Fluss users write ``1 min``, ``30 s`` or
``500ms``.
"""

from __future__ import annotations

from tierlake.server.config.durations import parse_duration
from tierlake.server.sqlapi.functions import functions


@functions.udf(returns="double")
def tierlake_duration_seconds(text: str | None) -> float | None:
    """Seconds in a Fluss-style duration such as ``'1 min'``, ``'30 s'`` or ``'500ms'``.

    Units: ms, s, min, h, d (and their long forms); a bare number is
    milliseconds, as in Fluss. A value that is not a duration fails the
    query with an error naming the value.

    Args:
      text: the duration; NULL gives NULL.
    """
    if text is None:
        return None
    return parse_duration(text, "tierlake_duration_seconds").total_seconds()
