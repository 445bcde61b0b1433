"""Durations as Fluss and Spark users write them: ``1 min``, ``30 s``, ``2h``, ``500ms``."""

from __future__ import annotations

import re
from datetime import timedelta

from tierlake.server.exceptions import InvalidArgumentError

_UNITS = {
    "ms": 0.001, "milli": 0.001, "millis": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
# Matched against the stripped text with fullmatch: no leading or trailing
# ``\s*`` to share the same spaces, so a long run of them costs linear time.
_PATTERN = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)")


def parse_duration(text: str, what: str = "duration") -> timedelta:
    """``'1 min'`` → ``timedelta(minutes=1)``; a bare number is milliseconds (Fluss)."""
    m = _PATTERN.fullmatch(str(text).strip())
    unit = m.group(2).lower() if m else ""
    if not m or (unit and unit not in _UNITS):
        raise InvalidArgumentError(
            f"{what}: cannot parse {text!r} as a duration (examples: '30 s', '1 min', '2 h', '500 ms')"
        )
    seconds = float(m.group(1)) * (_UNITS[unit] if unit else 0.001)
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds >= 120 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    if seconds == int(seconds):
        return f"{int(seconds)} s"
    return f"{seconds:.1f} s"
