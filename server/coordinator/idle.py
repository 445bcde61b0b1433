"""Idle tables get no round: a due table whose stream has not changed since
its last round started stays ``Scheduled`` (issue 54: 299 of 313 rounds of
an idle table moved nothing, each costing three state commits, a table load
and a worker slot that a busy table was waiting for).

"Changed" is decided on the stream's Iceberg metadata location, which every
commit, schema or property change and every maintenance run of the stream
moves on. The location is read just before the coordinator sends the table
to ``Pending``, and remembered once that change committed; the round then
plans from that location or a later one. At the table's next due time, an
unchanged location means nothing reached the stream since before that round
planned: everything in it is tiered, and a round would find nothing. The
read keeps each stream's ``Table`` and refreshes it, which costs one
metastore call and reads no metadata file while the location is unchanged.

A table still gets its round when:

- its stream's location moved (a write from any client or application, an
  ``ALTER TABLE``, a property change, maintenance of the stream);
- its managed maintenance is requested (``CALL sys.run_maintenance``) or its
  interval (``tierlake.maintenance.interval``) has passed: maintenance runs
  inside a round's assignment;
- this server has not seen a round of it start (after a restart, or when
  another server's coordinator sent it to ``Pending``);
- the location cannot be read (the round reports the reason).

Nothing here is persisted: a restart costs each table one round. A change
made to a lake table alone (an admin's ``DELETE`` in the lake) starts no
round; ``CALL sys.validate`` reports it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from tierlake.server.catalog.table_path import coordinator_path, load_table
from tierlake.server.coordinator.state_machine import Status, TableState

log = logging.getLogger("tierlake.coordinator")


class StreamWatch:
    """The metadata location each stream had when its last round was sent."""

    def __init__(self, spark: Any):
        self.spark = spark
        self._lock = threading.Lock()
        self._tables: dict[int, tuple[str, Any]] = {}  # table id → (path, Iceberg Table)
        self._sent: dict[int, str] = {}  # table id → location read before its last round was sent
        self._checked: dict[int, datetime] = {}  # table id → when an unchanged stream was last seen
        self.skipped = 0  # due times that ran no round (tests, logs)

    def location(self, state: TableState) -> str:
        """The stream's current metadata location (one metastore call)."""
        entry = self._tables.get(state.table_id)
        if entry is None or entry[0] != state.path:
            stream_table = load_table(self.spark, coordinator_path(state.path))
            self._tables[state.table_id] = (state.path, stream_table)
        else:
            stream_table = entry[1]
            stream_table.refresh()
        return str(stream_table.operations().current().metadataFileLocation())

    def due_unchanged(self, states: Iterable[TableState], now: datetime,
                      maintenance_wanted: Callable[[int, datetime], bool]) -> tuple[set[int], dict[int, str]]:
        """``(quiet, read)`` for the ``Scheduled`` tables among ``states`` that are due at ``now``:
        ``quiet`` the ids whose stream is unchanged since their last round was sent (no round now),
        ``read`` the location read for each of the others (given to :meth:`sent` once they went)."""
        quiet: set[int] = set()
        read: dict[int, str] = {}
        states = list(states)
        with self._lock:
            for gone in set(self._tables) - {s.table_id for s in states}:
                self._forget(gone)  # dropped or disabled
            for state in states:
                if state.status is not Status.SCHEDULED or (state.next_due is not None and state.next_due > now):
                    continue
                checked = self._checked.get(state.table_id)
                if checked is not None and now - checked < state.freshness:
                    quiet.add(state.table_id)  # seen unchanged less than a freshness interval ago
                    continue
                try:
                    location = self.location(state)
                except Exception as e:  # noqa: BLE001 - the round reports why the table cannot be read
                    log.debug("could not read the stream of %s: %s", state.path, e)
                    self._forget(state.table_id)
                    continue
                if self._sent.get(state.table_id) == location and not maintenance_wanted(state.table_id, now):
                    quiet.add(state.table_id)
                    self._checked[state.table_id] = now
                    self.skipped += 1
                else:
                    read[state.table_id] = location
        return quiet, read

    def sent(self, read: dict[int, str], went: Iterable[int]) -> None:
        """Remember the locations of the tables whose move to ``Pending`` committed."""
        with self._lock:
            for table_id in went:
                if table_id in read:
                    self._sent[table_id] = read[table_id]
                    self._checked.pop(table_id, None)

    def _forget(self, table_id: int) -> None:
        self._tables.pop(table_id, None)
        self._sent.pop(table_id, None)
        self._checked.pop(table_id, None)
