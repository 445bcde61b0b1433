"""Background work that runs every so often in the server (the scheduler's
tick, the backlog probe): one daemon thread, stopped through an event, that
logs a failed run and keeps going (a failed tick must not end the schedule)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


def every(interval_s: float, stop: threading.Event, run: Callable[[], None], name: str,
          log: logging.Logger, what: str) -> threading.Thread:
    """Start a daemon thread ``name`` that calls ``run()`` every ``interval_s``
    seconds until ``stop`` is set; a failure is logged as "``what`` failed"."""

    def loop() -> None:
        while not stop.wait(interval_s):
            try:
                run()
            except Exception:
                log.exception("%s failed", what)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
