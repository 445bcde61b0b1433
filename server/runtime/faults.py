"""Fault injection for the crash-safety suite.

``TIERLAKE_FAULT=<point>`` (or the setting ``tierlake.fault``) kills the process
with SIGKILL when the tiering service (or an atomic CTAS) reaches ``<point>``; ``<point>:<ms>``
arms a timer at the point that fires ``ms`` milliseconds later (to die *during*
the step that follows); ``<point>@<n>`` fires the n-th time this process
reaches the point (so it can finish rounds before it dies).
``TIERLAKE_FAULT_PAUSE=<point>`` blocks at the point until the file named by
``TIERLAKE_FAULT_RESUME`` exists. Never set in production; a no-op when unset.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

log = logging.getLogger("tierlake.faults")

POINTS = ("after-plan", "during-write", "after-lake-commit", "before-commit",
          "ctas-after-begin", "ctas-after-write", "ctas-during-commit", "ctas-after-rename")


def _die() -> None:
    log.warning("fault injection: SIGKILL")
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


_hits: dict[str, int] = {}
_hits_lock = threading.Lock()


def _reached(name: str) -> int:
    with _hits_lock:
        _hits[name] = _hits.get(name, 0) + 1
        return _hits[name]


def point(name: str) -> None:
    """Called by the tiering service at each named step."""
    spec = os.environ.get("TIERLAKE_FAULT", "")
    if spec:
        where, _, delay = spec.partition(":")
        where, _, nth = where.partition("@")
        if where == name and _reached(name) == int(nth or 1):
            if delay:
                timer = threading.Timer(int(delay) / 1000, _die)
                timer.daemon = True
                timer.start()
            else:
                _die()
    if os.environ.get("TIERLAKE_FAULT_PAUSE") == name:
        resume = Path(os.environ.get("TIERLAKE_FAULT_RESUME", "/nonexistent"))
        log.warning("fault injection: paused at %s until %s exists", name, resume)
        while not resume.exists():
            time.sleep(0.1)
