"""Taking a non-append commit out of a stream table without losing an append.

A user ``DELETE``, ``UPDATE``, ``MERGE`` or overwrite on a stream table is a
commit tiering cannot carry (server/changelog/planner.py). Rolling the table
back to the snapshot before it would throw away every append made after it;
:func:`drop_stream_commit` rolls back *and* re-applies those appends
(Iceberg's cherry-pick: their data files as new appends, oldest first, so a
primary-key table's changes keep their order) in one metadata commit. Commits
after it that are not appends are dropped with it: ``replace`` commits only
rewrote files, tierlake's maintenance commits only removed tiered ones, and
another user change is what this undoes.

Concurrent writers must be stopped first: an append committed while this
runs could end up outside the table's new history.
"""

from __future__ import annotations

import logging
from typing import Any

from tierlake.server.catalog.properties import MAINTENANCE
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.exceptions import InvalidArgumentError

log = logging.getLogger("tierlake.tiering")

RESULT_COLUMNS = [("snapshot_id", "bigint"), ("operation", "string"), ("action", "string"),
                  ("new_snapshot_id", "bigint")]
REAPPLIED, DROPPED, TAKEN_OUT = "re-applied", "dropped", "taken out"


def _history_after(table: Any, snapshot_id: int) -> list[Any]:
    """The current history after ``snapshot_id``, oldest first; an error if it is not in it."""
    later, snapshot = [], table.currentSnapshot()
    while snapshot is not None and int(snapshot.snapshotId()) != snapshot_id:
        later.append(snapshot)
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    if snapshot is None:
        return None
    return list(reversed(later))


def drop_stream_commit(spark: Any, stream: TablePath, snapshot_id: int) -> list[tuple]:
    """Take commit ``snapshot_id`` out of ``stream``'s history and re-apply the appends after it.

    Returns one row per commit from it on: ``(snapshot_id, operation, action, new_snapshot_id)``.
    """
    table = load_table(spark, stream)
    target = table.snapshot(snapshot_id)
    later = None if target is None else _history_after(table, snapshot_id)
    if later is None:
        raise InvalidArgumentError(f"snapshot {snapshot_id} is not in the current history of {stream}")
    operation = str(target.operation())
    if operation == "append":
        raise InvalidArgumentError(f"snapshot {snapshot_id} of {stream} is an append: tiering carries it")
    parent = target.parentId()
    if parent is None:
        raise InvalidArgumentError(
            f"snapshot {snapshot_id} is the first commit of {stream} and cannot be taken out: create the table again")
    appends = [s for s in later if str(s.operation()) == "append"]
    manage = table.manageSnapshots().rollbackTo(int(parent))
    for snapshot in appends:
        manage = manage.cherrypick(int(snapshot.snapshotId()))
    manage.commit()

    # Match the new snapshots to the appends they re-applied (Iceberg records the source in the summary).
    table = load_table(spark, stream)
    new_ids: dict[int, int] = {}
    snapshot = table.currentSnapshot()
    while snapshot is not None and int(snapshot.snapshotId()) != int(parent):
        source = dict(snapshot.summary()).get("source-snapshot-id")
        new_ids[int(source) if source else int(snapshot.snapshotId())] = int(snapshot.snapshotId())
        parent_id = snapshot.parentId()
        snapshot = None if parent_id is None else table.snapshot(parent_id)
    rows = [(snapshot_id, operation, TAKEN_OUT, None)]
    for s in later:
        sid, op = int(s.snapshotId()), str(s.operation())
        if op == "append":
            rows.append((sid, op, REAPPLIED, new_ids.get(sid)))
        else:
            what = "maintenance" if MAINTENANCE in dict(s.summary()) else op
            rows.append((sid, what, DROPPED, None))
    log.info("took snapshot %d (%s) out of %s: rolled back to %d, re-applied %d append(s)", snapshot_id,
             operation, stream, parent, len(appends))
    return rows
