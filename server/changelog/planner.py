"""Plan a round: where the lake is, where the stream ends, what lies between.

Log position = the stream table's Iceberg snapshot sequence number. The lake
table's newest tiering commit records the position it covers
(``tiering.source-position``), so the lake, not the coordinator, says where a
round starts: a lake commit whose coordinator update was lost is adopted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tierlake.server.catalog.properties import LOG_START_PROPERTY as LOG_START
from tierlake.server.catalog.properties import MAINTENANCE, SOURCE_POSITION, SOURCE_SNAPSHOT
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import positions
from tierlake.server.changelog.handle import OnHandle, TableHandle
from tierlake.server.changelog.positions import Registered, lake_position, summary
from tierlake.server.exceptions import NonAppendCommitError, TieringGuardError

__all__ = ["MAINTENANCE", "SOURCE_POSITION", "SOURCE_SNAPSHOT", "Registered", "lake_position", "summary"]

# ``replace`` commits (rewrite_data_files, rewrite_manifests, tierlake's stream
# compaction) change files, never rows: rounds read each append's own files
# (server/changelog/lake_write.py), so a replace is carried by skipping it.
REPLACE = "replace"
MAX_SHOWN = 5  # cherry-picks spelled out in an error (the coordinator keeps 2048 characters of it)


class LogTruncatedError(TieringGuardError):
    """The changelog no longer reaches back to the lake's position: a KV
    snapshot split can rebuild it (server/tiering/snapshot_split.py)."""


@dataclass(frozen=True)
class StreamCommit:
    sequence: int
    snapshot_id: int
    operation: str
    summary: dict[str, str]
    timestamp_ms: int

    @property
    def rows(self) -> int:
        return int(self.summary.get("added-records", 0))

    @property
    def bytes(self) -> int:
        return int(self.summary.get("added-files-size", 0))

    @property
    def files(self) -> int:
        return int(self.summary.get("added-data-files", 0))


@dataclass
class Chunk:
    """Consecutive commits tiered as one lake commit."""

    start_snapshot_id: int | None  # exclusive; None = from the table's first snapshot
    end_snapshot_id: int
    start_position: int
    end_position: int
    commits: list[StreamCommit]
    snapshot: Any = None  # a KV snapshot split (server/tiering/snapshot_split.py) instead of commits
    rewritten: bool = False  # a replace commit lies in (start, end]: the appends' files were rewritten since

    @property
    def snapshot_ids(self) -> list[int]:
        return [c.snapshot_id for c in self.commits]


@dataclass
class Plan(OnHandle):
    # The table the plan was made for, with the Iceberg tables it was made from: the round's
    # steps read them (server/changelog/handle.py).
    handle: TableHandle = field(repr=False, compare=False)
    lake_position: int
    lake_snapshot_id: int | None
    end_position: int
    commits: list[StreamCommit] = field(default_factory=list)
    start_snapshot_id: int | None = None
    snapshot_split: Any = None  # set by server/tiering/snapshot_split.py: read it before the commits
    replaced: list[int] = field(default_factory=list)  # positions of replace commits after lake_position
    stream_uuid: str | None = None  # recorded in the lake with every commit (server/changelog/positions.py)

    @property
    def empty(self) -> bool:
        return not self.commits and self.snapshot_split is None

    def chunks(self, max_rows: int) -> list[Chunk]:
        """Split the commits so that each chunk holds about ``max_rows`` rows."""
        out: list[Chunk] = []
        if self.snapshot_split is not None:
            split = self.snapshot_split
            out.append(Chunk(None, split.stream_snapshot_id, split.log_position, split.log_position, [], split))
        start_id, start_pos, current = self.start_snapshot_id, self.lake_position, []
        for commit in self.commits:
            current.append(commit)
            if sum(c.rows for c in current) >= max_rows:
                out.append(Chunk(start_id, commit.snapshot_id, start_pos, commit.sequence, current))
                start_id, start_pos, current = commit.snapshot_id, commit.sequence, []
        if current:
            out.append(Chunk(start_id, current[-1].snapshot_id, start_pos, current[-1].sequence, current))
        for chunk in out:
            chunk.rewritten = any(chunk.start_position < p <= chunk.end_position for p in self.replaced)
        return out


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def plan_round(handle: TableHandle, start: int | None = None, registered: Registered | None = None) -> Plan:
    """Compare the lake's position with the stream's end and list the commits between.

    ``start``: plan the commits after this position instead (a KV snapshot split covers the rest).
    ``registered``: the coordinator's record of the table, cross-checked
    (server/changelog/positions.py): its tiered position and stream UUID.
    The plan keeps ``handle``.
    """
    stream, lake = handle.stream, handle.lake
    stream_table, lake_table = handle.stream_table, handle.lake_table
    positions.check_identity(stream, lake, stream_table, lake_table, registered)
    position, _, found = positions.recorded_position(lake_table, lake)
    positions.cross_check(lake, position, found, registered)
    if start is not None:
        position = start
    log_start = int(handle.properties.get(LOG_START) or 0)
    if position < log_start:
        raise LogTruncatedError(
            f"the lake table {lake} has tiered stream position {position}, but log retention removed the "
            f"changelog of {stream} up to position {log_start}; the lake table cannot be brought up to date "
            "from the log")
    lake_snapshot = lake_table.currentSnapshot()
    plan = Plan(handle, position, None if lake_snapshot is None else int(lake_snapshot.snapshotId()),
                end_position=position, stream_uuid=str(stream_table.uuid()))
    head = stream_table.currentSnapshot()
    if head is None:
        return plan
    end = int(head.sequenceNumber())
    if end < position:
        raise TieringGuardError(
            f"the lake table {lake} has tiered stream position {position}, but the stream table {stream} ends at "
            f"{end}: was the stream table dropped and created again? Drop the lake table (or disable and enable "
            "tiering) to rebuild it"
        )
    commits: list[StreamCommit] = []
    snapshot = head
    while snapshot is not None and int(snapshot.sequenceNumber()) > position:
        commits.append(StreamCommit(int(snapshot.sequenceNumber()), int(snapshot.snapshotId()),
                                    str(snapshot.operation()), summary(snapshot), int(snapshot.timestampMillis())))
        parent = snapshot.parentId()
        if parent is None:
            snapshot = None
            break
        snapshot = stream_table.snapshot(parent)
        if snapshot is None:
            raise LogTruncatedError(
                f"the stream table {stream} no longer has the commits after position {position} "
                f"(snapshot {parent} was expired); the lake table {lake} cannot be brought up to date from the log"
            )
    if snapshot is not None:
        plan.start_snapshot_id = int(snapshot.snapshotId())
    elif position > 0:
        raise TieringGuardError(
            f"the stream table {stream} has no snapshot at tiered position {position}; its history was rewritten"
        )
    commits.reverse()
    for index, commit in enumerate(commits):
        if commit.operation in ("append", REPLACE) or MAINTENANCE in commit.summary:
            continue
        parent = commits[index - 1].snapshot_id if index > 0 else plan.start_snapshot_id
        raise NonAppendCommitError(non_append_message(stream, commit, parent, commits[index + 1:]))
    plan.commits = [c for c in commits if c.operation == "append"]
    plan.replaced = [c.sequence for c in commits if c.operation == REPLACE]
    plan.end_position = end
    return plan


def range_chunk(stream_table: Any, start_id: int | None, start_position: int, head: Any) -> Chunk:
    """The stream commits ``(start_position, head]`` as one chunk (a KV snapshot's range): its appends, and
    whether a ``replace`` commit inside it rewrote their files (server/changelog/lake_write.py reads them)."""
    commits: list[StreamCommit] = []
    replaced: list[int] = []
    snapshot = head
    while snapshot is not None and int(snapshot.sequenceNumber()) > start_position:
        operation = str(snapshot.operation())
        if operation == "append":
            commits.append(StreamCommit(int(snapshot.sequenceNumber()), int(snapshot.snapshotId()), operation,
                                        summary(snapshot), int(snapshot.timestampMillis())))
        elif operation == REPLACE:
            replaced.append(int(snapshot.sequenceNumber()))
        parent = snapshot.parentId()
        snapshot = None if parent is None else stream_table.snapshot(parent)
    commits.reverse()
    chunk = Chunk(start_id, int(head.snapshotId()), start_position, int(head.sequenceNumber()), commits)
    chunk.rewritten = bool(replaced)
    return chunk


def non_append_message(stream: TablePath, commit: StreamCommit, parent: int | None,
                       later: list[StreamCommit]) -> str:
    """The error of a non-append stream commit, with the calls that take it out and lose no append."""
    what = (f"stream table {stream} has a non-append commit that tiering cannot carry: snapshot "
            f"{commit.snapshot_id} (operation '{commit.operation}', log position {commit.sequence}, committed "
            f"{_when(commit.timestamp_ms)}). Stream tables are append-only logs: write changes as rows "
            "(for primary-key tables with _change_type '-D' for deletes). ")
    if parent is None:
        return what + f"It is the table's first commit and cannot be taken out: create {stream} again"
    appends = [c.snapshot_id for c in later if c.operation == "append"]
    shown = ", ".join(f"CALL spark_catalog.system.cherrypick_snapshot('{stream}', {a})" for a in appends[:MAX_SHOWN])
    by_hand = f"CALL spark_catalog.system.rollback_to_snapshot('{stream}', {parent})" + (f"; {shown}" if shown else "")
    if len(appends) > MAX_SHOWN:
        by_hand += f"; … ({len(appends) - MAX_SHOWN} more appends, oldest first)"
    return what + (
        f"To take it out without losing any append ({len(appends)} committed after it), stop the writers of "
        f"{stream}, then CALL sys.drop_stream_commit('{stream}', {commit.snapshot_id}) and "
        f"CALL sys.retry_tiering('{stream}'). It rolls the table back to snapshot {parent} and re-applies the "
        f"later appends in their order, in one commit; by hand: {by_hand}"
    )
