"""A process-wide version of the ``sys`` state: bumped after every commit to a
``sys`` table made in this process (:class:`server.runtime.state_table.SmallTable`
and anyone else who changes sys state), so readers that keep answers derived
from that state (the gateway's status-read cache) know when to drop them."""

from __future__ import annotations

import itertools
import threading

_lock = threading.Lock()
_counter = itertools.count(1)
_version = 0


def current() -> int:
    """The version now; compare with a later :func:`current` to see a change."""
    return _version


def bump() -> int:
    """Record that sys state changed (call AFTER the change committed)."""
    global _version
    with _lock:
        _version = next(_counter)
        return _version
