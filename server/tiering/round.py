"""Run a planned round: the changelog is written into a branch of the lake
table (:mod:`tierlake.server.changelog.lake_write`); ``main`` moves to it by
fast-forward.

Fast-forward is the lake commit and a compare-and-set: it fails when ``main``
moved since the round was planned, so a worker whose table was reassigned
(and tiered by another worker) can never commit a duplicate. The epoch is
checked once more just before it, through the coordinator.

The steps of a round, in order (:func:`run_round`): sync the lake schema →
open the branch (beside the first chunk's preparation) → per chunk: write it to the branch, quality gate, check the
epoch, fast-forward ``main`` → drop the branch → schedule the fresh view's re-pin
(or leave it to the caller, after its report: ``defer_repin``) → warn-mode
quality check. Every step reads the table through the plan's handle
(:mod:`tierlake.server.changelog.handle`: its assignment, spec and the stream
and lake tables loaded once), refreshing the lake where it decides on
``main`` or the branch.
The fault points (``after-plan``, ``during-write``, ``before-commit``,
``after-lake-commit``) name where the crash-safety tests kill a worker.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.changelog import file_copy, fresh_view, lake_write, write_strategy
from tierlake.server.changelog.handle import Assignment
from tierlake.server.changelog.lake_schema import Carried
from tierlake.server.changelog.planner import SOURCE_POSITION, SOURCE_SNAPSHOT, Chunk, Plan
from tierlake.server.changelog.positions import position_properties
from tierlake.server.changelog.write_strategy import WriteStrategy
from tierlake.server.exceptions import FencedEpochError
from tierlake.server.quality.gate import QualityGate
from tierlake.server.runtime import faults
from tierlake.server.runtime.jvm import string_list
from tierlake.server.runtime.jvm_errors import Kind, is_
from tierlake.server.tiering import snapshot_split

log = logging.getLogger("tierlake.tiering")

BRANCH_PREFIX = "tierlake_"


@dataclass
class RoundResult:
    end_position: int
    rows: int = 0
    bytes: int = 0
    files: int = 0
    force_finished: bool = False
    commits: int = 0
    schema_changed: bool = False  # nothing to tier, but the view must show a schema change (re-pin)

    def add(self, chunk: Chunk) -> None:
        """Count a chunk that reached ``main``."""
        self.end_position = chunk.end_position
        self.rows += sum(c.rows for c in chunk.commits)
        self.bytes += sum(c.bytes for c in chunk.commits)
        self.files += sum(c.files for c in chunk.commits)
        self.commits += 1


def run_round(plan: Plan, check_epoch: Callable[[], None], hook: Callable[[str], None] | None = None,
              defer_repin: bool = False) -> RoundResult:
    """Tier ``plan`` into its table's lake; see the module docstring for the protocol.

    The round runs under the handle's assignment (``plan.handle.assignment``:
    table id, epoch, job), for at most ``table.datalake.tiering.max-round-duration``
    (none: no bound), in chunks of ``table.datalake.tiering.chunk-rows``.

    ``hook`` is called with the name of each step (tests pause a worker there).
    ``defer_repin``: a round that returns leaves the fresh view's re-pin to the
    caller (``fresh_view.after_lake_commit`` once it reported the round, when
    ``result.commits``); a round that fails after publishing schedules it itself.
    """

    def point(name: str) -> None:
        faults.point(name)
        if hook is not None:
            hook(name)

    started = time.monotonic()
    handle = plan.handle
    max_round = handle.setting(P.MAX_ROUND)
    max_duration_s = float("inf") if max_round is None else max_round.total_seconds()
    chunk_rows = handle.setting(P.CHUNK_ROWS)
    result = RoundResult(end_position=plan.lake_position)
    if plan.empty:
        # Nothing to tier, but an ALTER TABLE on the stream reaches the lake and the
        # fresh view within a freshness interval all the same (cached when unchanged).
        lake_write.sync_lake_schema(handle)
        result.schema_changed = fresh_view.schema_changed(handle)
        return result
    columns = lake_write.sync_lake_schema(handle)
    branch = branch_name(handle.assignment.table_id, handle.assignment.epoch)
    # The branch is created (a lake commit) while the first chunk's write is prepared: reading the
    # stream's metadata and rendering the MERGE need no branch, only its name.
    opening = _OPENER.submit(open_branch, plan, branch)
    opened = False

    def branch_ready() -> None:
        nonlocal opened
        if not opened:
            opening.result()  # FencedEpochError: main moved since the plan, nothing was written
            opened = True

    gate = QualityGate(plan)  # table.datalake.quality (server/quality/gate.py)
    branch_dropped = published = returned = False
    try:
        chunks = plan.chunks(chunk_rows)
        for index, chunk in enumerate(chunks):
            write_chunk(plan, chunk, branch, columns, commit_properties(handle.assignment, chunk), point, branch_ready,
                        into_empty=index == 0 and plan.lake_snapshot_id is None)
            gate.before_publish(branch, chunk)  # block mode: a failing branch is never published
            point("before-commit")
            check_epoch()
            last = index == len(chunks) - 1 or time.monotonic() - started >= max_duration_s
            fast_forward(plan, branch, drop_branch=last,
                         recorded=position_properties(chunk.end_position, chunk.end_snapshot_id, plan.stream_uuid))
            published = True
            branch_dropped = last
            point("after-lake-commit")
            result.add(chunk)
            if last and index < len(chunks) - 1:
                result.force_finished = True
                log.info("round of %s reached its maximum duration after %d of %d chunks",
                         plan.stream, index + 1, len(chunks))
                break
        returned = True
    finally:
        if not opened:
            try:
                branch_ready()  # a write that failed early: the branch may still be being created
            except Exception:  # noqa: BLE001 - not created, or open_branch removed it itself
                pass
        if opened and not branch_dropped:
            drop_branch(plan, branch)
        if published and not (returned and defer_repin):
            # Once per round, after its last lake commit (also one that a later chunk's failure
            # follows): every pin the view ever had is exact on its own (server/changelog/fresh_view.py),
            # an older one only reads more of the stream, so the pins between two commits of one
            # round were never needed.
            fresh_view.after_lake_commit(handle)
    gate.after_round(result.commits, result.end_position)  # warn mode: validate what was published
    return result


# Threads that create rounds' branches (open_branch) while the rounds prepare their first writes: one per
# round at a time, so as many as a process runs rounds at once; a busy pool only delays a round.
_OPENER = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tierlake-branch")


def branch_name(table_id: int, epoch: int) -> str:
    """A new round's branch: its table and epoch (stale ones are found by them), unique."""
    return f"{BRANCH_PREFIX}{table_id}_{epoch}_{uuid.uuid4().hex[:8]}"


def open_branch(plan: Plan, branch: str | None = None) -> str:
    """Create the round's branch exactly where the plan found ``main``; fenced if ``main`` moved.

    Runs in an opener thread beside the round's own (:func:`run_round`): only
    it uses the round's lake table object until the round waits for it."""
    handle = plan.handle
    table_id, epoch = handle.assignment.table_id, handle.assignment.epoch
    lake_table = handle.fresh_lake()  # the refs as they are now, as a fresh load would show them
    branch = branch or branch_name(table_id, epoch)
    _drop_stale_branches(lake_table, table_id)
    manage = lake_table.manageSnapshots()
    (manage.createBranch(branch, plan.lake_snapshot_id) if plan.lake_snapshot_id is not None
     else manage.createBranch(branch)).commit()
    # On a lake whose main had no snapshot when planned, createBranch bases
    # the branch on whatever main is *now*; the fast-forward CAS only holds if
    # the branch starts exactly where the plan did.
    current = handle.fresh_lake()
    base = current.snapshot(branch)
    if plan.lake_snapshot_id is None:
        # Iceberg gives a branch made on an empty table an empty root snapshot
        # of its own; made after main got a commit, it would share main's.
        main = current.currentSnapshot()
        moved = base is None or base.parentId() is not None or (
            main is not None and int(main.snapshotId()) == int(base.snapshotId()))
    else:
        moved = base is None or int(base.snapshotId()) != plan.lake_snapshot_id
    if moved:
        handle.fresh_lake().manageSnapshots().removeBranch(branch).commit()
        raise FencedEpochError(
            f"lake table {plan.lake} changed since this round (epoch {epoch}) was planned; "
            "another worker committed first, this round's writes are discarded"
        )
    return branch


def commit_properties(assignment: Assignment, chunk: Chunk) -> dict[str, str]:
    """The summary of a chunk's lake commit: the stream position it covers is where the next round starts."""
    return {
        P.TIERING_TABLE_ID: str(assignment.table_id),
        P.TIERING_EPOCH: str(assignment.epoch),
        SOURCE_POSITION: str(chunk.end_position),
        SOURCE_SNAPSHOT: str(chunk.end_snapshot_id),
        P.TIERING_JOB_ID: assignment.job_id,
        P.COMMIT_USER: lake_write.COMMIT_USER,
    }


def write_chunk(plan: Plan, chunk: Chunk, branch: str, columns: list[Carried],
                properties: dict[str, str], point: Callable[[str], None],
                branch_ready: Callable[[], None] = lambda: None, into_empty: bool = False) -> None:
    """One chunk as one commit on the branch, written the way server/changelog/write_strategy.py
    chooses (a KV snapshot split, a log table's file copy or append, a primary-key load or MERGE).

    ``branch_ready`` returns once the branch exists (it raises if it could not be opened); a
    changelog MERGE is prepared before it is called. ``into_empty``: the branch holds no rows
    (the round's first chunk into a lake that had no snapshot when planned); a primary-key range
    whose lake is bucketed only by the key is then appended rather than merged."""
    target = [plan.lake.database, plan.lake.table, f"branch_{branch}"]
    handle = plan.handle

    def files_copyable() -> bool:
        branch_ready()  # the copy reads the lake table object that opened the branch (it sees its own commit)
        return file_copy.usable(handle, chunk)

    strategy = write_strategy.choose(plan.spec, snapshot_split=chunk.snapshot is not None, into_empty=into_empty,
                                     files_copyable=files_copyable)
    if strategy is WriteStrategy.KV_SNAPSHOT_SPLIT:
        branch_ready()
        point("after-plan")
        point("during-write")
        snapshot_split.write_split(plan, chunk.snapshot, target, properties)
        return
    if strategy is WriteStrategy.LOG_FILE_COPY:  # server/changelog/file_copy.py: no Spark job
        point("after-plan")
        point("during-write")
        file_copy.append(handle, chunk, branch, properties)
        return
    with lake_write.ChangelogWrite(handle, target, chunk, columns, strategy=strategy) as write:
        branch_ready()
        point("after-plan")
        point("during-write")
        write.commit(properties)


def fast_forward(plan: Plan, branch: str, drop_branch: bool, recorded: dict[str, str] | None = None) -> None:
    """The lake commit: ``main`` to the branch (and, on the last chunk, the branch dropped in the same commit).

    ``recorded``: lake table properties set in the same metadata commit (the
    tiered position, which snapshot expiry cannot remove: server/changelog/positions.py).
    """
    try:
        # Refreshed: the branch's new snapshot was committed by Spark SQL, which the round's table
        # object does not see; main as it is now is what the fast-forward checks its ancestry against.
        transaction = plan.handle.fresh_lake().newTransaction()
        manage = transaction.manageSnapshots().fastForwardBranch("main", branch)
        if drop_branch:
            manage = manage.removeBranch(branch)  # one metadata commit instead of two
        manage.commit()
        if recorded:
            # Which lake snapshot holds the rows up to the position: REPLACE TABLE keeps the
            # properties but starts main afresh (server/changelog/positions.py tells them apart).
            head = transaction.table().currentSnapshot()  # main, fast-forwarded in this transaction
            if head is not None:
                recorded = {**recorded, P.LAKE_MAIN_SNAPSHOT: str(head.snapshotId())}
            update = transaction.updateProperties()
            for key, value in recorded.items():
                update = update.set(key, value)
            update.commit()
        transaction.commitTransaction()
    except Exception as e:
        if is_(e, Kind.NOT_AN_ANCESTOR):
            raise FencedEpochError(
                f"lake table {plan.lake} changed while this round (epoch {plan.handle.assignment.epoch}) ran; "
                "another worker committed first, this round's writes are discarded"
            ) from e
        raise


def drop_branch(plan: Plan, branch: str) -> None:
    """Best effort, after a round that did not publish its last chunk."""
    try:
        plan.handle.fresh_lake().manageSnapshots().removeBranch(branch).commit()
    except Exception:
        log.warning("could not drop branch %s of %s", branch, plan.lake, exc_info=True)


def _drop_stale_branches(lake: Any, table_id: int) -> None:
    """Branches of earlier, crashed rounds (their data never reached main)."""
    prefix = f"{BRANCH_PREFIX}{table_id}_"
    stale = [name for name in string_list(lake.refs().keySet()) if name.startswith(prefix)]
    if stale:
        manage = lake.manageSnapshots()
        for name in stale:
            manage = manage.removeBranch(name)
        manage.commit()
        log.info("dropped stale tiering branches %s", stale)
