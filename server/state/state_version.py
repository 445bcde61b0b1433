"""A process-wide version of the ``sys`` state: bumped after every commit to a
``sys`` table made in this process (:class:`server.state.state_table.SmallTable`
and anyone else who changes sys state), so readers that keep answers derived
from that state (the gateway's status-read cache) know when to drop them."""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable

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


_settlers: list[weakref.WeakMethod] = []


def on_settle(flush: Callable[[], object]) -> None:
    """Register the bound method ``flush()`` of a writer of sys rows that this
    process has accepted but not yet committed (the round history is written
    behind the state); readers that want read-your-writes call :func:`settle`.
    Held weakly: a writer that is gone is forgotten."""
    with _lock:
        _settlers[:] = [s for s in _settlers if s() is not None]
        _settlers.append(weakref.WeakMethod(flush))


def settle() -> None:
    """Wait for the writes registered with :func:`on_settle` (at once when none is pending)."""
    with _lock:
        flushes = [s() for s in _settlers]
    for flush in flushes:
        if flush is not None:
            flush()
