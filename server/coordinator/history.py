"""The round history (``sys.tiering_round_log``), written behind the state.

A state-changing heartbeat used to be two Iceberg commits in a row: the
state table, then the history append. The state is what fences and
schedules; the history is a record. So the coordinator commits the state,
answers, and hands the round rows to this writer, which appends whatever has
accumulated in one commit (many rounds, many tables) on its own thread.

What a reader sees: the gateway settles pending history before it answers a
statement that names ``sys`` (:func:`server.state.state_version.settle`),
so a client never sees a round's state change without its history row.
What a crash may lose: rows of rounds that finished in the moment before a
``kill -9`` whose append had not committed yet (normally well under a
second's worth); the state table, lake commits and positions are unaffected.
A clean stop writes everything first. An append that fails is retried with a
back-off; at most ``MAX_PENDING`` rows wait, the oldest dropped beyond that
(logged), so a broken history table cannot grow the server's memory.

Appends are idempotent: each batch carries a token in its snapshot summary and
a retry sends the same rows with the same token, so an append whose commit
state was unknown (it landed, the answer was lost) is not written twice.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from tierlake.server.state import state_version

log = logging.getLogger("tierlake.coordinator")

MAX_PENDING = 10_000
RETRY_S = (0.2, 1.0, 5.0)


class HistoryWriter:
    """Appends round rows to ``table`` (a :class:`SmallTable`) in the background."""

    def __init__(self, table: Any):
        self.table = table
        self._cond = threading.Condition()
        self._pending: list[dict[str, Any]] = []
        self._writing = 0  # rows taken by an append in flight
        self._retry: tuple[str, list[dict[str, Any]]] | None = None  # a failed batch, retried as it was
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.appends = 0
        self.dropped = 0
        state_version.on_settle(self.flush)

    def add(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        with self._cond:
            self._pending.extend(rows)
            extra = len(self._pending) - MAX_PENDING
            if extra > 0:
                del self._pending[:extra]
                self.dropped += extra
                log.error("round history: %d row(s) dropped, the history table kept failing", extra)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="tierlake-round-history", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        if self._stopped:
            self._write_now()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every row handed in so far is committed (or ``timeout``)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._writing and not self._retry, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Write what is pending, then end the thread."""
        self.flush(timeout)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _write_now(self) -> None:
        with self._cond:
            rows, self._pending = self._pending, []
        if rows:
            try:
                self.table.append(rows, token=str(uuid.uuid4()))
            except Exception:
                log.exception("could not record %d tiering round(s)", len(rows))

    def _next_batch(self) -> tuple[str, list[dict[str, Any]]]:
        if self._retry is not None:
            batch, self._retry = self._retry, None
            return batch
        rows, self._pending = self._pending, []
        return str(uuid.uuid4()), rows

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._retry or self._stopped)
                if not self._pending and not self._retry:
                    return
                token, rows = self._next_batch()
                self._writing = len(rows)
            try:
                self.table.append(rows, token=token)
                self.appends += 1
                failures = 0
            except Exception:
                failures += 1
                log.warning("could not record %d tiering round(s) (attempt %d); retrying", len(rows), failures,
                            exc_info=True)
                with self._cond:
                    # The same rows under the same token: if this attempt landed after all, the
                    # retry finds the token in the table's history and appends nothing.
                    self._retry = (token, rows)
            finally:
                with self._cond:
                    self._writing = 0
                    self._cond.notify_all()
            if failures:
                with self._cond:
                    self._cond.wait(RETRY_S[min(failures, len(RETRY_S)) - 1])
