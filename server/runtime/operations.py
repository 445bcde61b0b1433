"""Cancellation of statements tierlake answers itself (gateway-answered ones).

A statement the handler answers runs on its own thread when the client asked
for asynchronous execution (Hive JDBC and beeline always do; PyHive with
``async_=True``). The client then polls GetOperationStatus and may send
CancelOperation, or simply disconnect; both cancel the operation. Code
running a statement learns about it through :func:`current`: it registers
callbacks (e.g. cancelling a Spark job group) and checks
:attr:`OperationControl.cancelled` at its commit point.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("tierlake.gateway")

_current = threading.local()


class OperationControl:
    """Cancellation of one running statement; safe to use from any thread."""

    def __init__(self, description: str = "", timeout_s: int = 0):
        self.description = description
        self.timeout_s = timeout_s  # the client's own time limit of the statement (queryTimeout; 0: none)
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` when the operation is cancelled (at once if it
        already was); returns a function that unregisters it."""
        with self._lock:
            if not self._cancelled.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        self._run(callback)
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled.is_set():
                return
            self._cancelled.set()
            callbacks, self._callbacks = self._callbacks, []
        # Every statement's handle is cancelled when its session closes, most long after they ended:
        # only a cancel that stops something running is worth a line at INFO.
        log.log(logging.INFO if callbacks else logging.DEBUG, "cancelling %s",
                self.description or "a local statement")
        for callback in callbacks:
            self._run(callback)

    @staticmethod
    def _run(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.warning("cancel callback failed", exc_info=True)


def current() -> OperationControl | None:
    """The control of the statement running on this thread, if any."""
    return getattr(_current, "control", None)


class running:
    """``with running(control):`` makes ``control`` current on this thread."""

    def __init__(self, control: OperationControl):
        self.control = control

    def __enter__(self) -> OperationControl:
        self._previous = current()
        _current.control = self.control
        return self.control

    def __exit__(self, *exc_info) -> None:
        _current.control = self._previous
