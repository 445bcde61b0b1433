"""Snapshot splits (seed 003's TieringSnapshotSplit) and the tiering job's leases.

When a primary-key table's lake table must be (re)built and the changelog no
longer reaches back to the lake's position (log retention; docs/design.md, 'KV snapshots'),
a round reads the newest KV snapshot — the state at its log position — into the
round's branch of the lake table, replacing what was there, then tiers the
log from that position as usual; ``main`` moves to the branch by the same
fast-forward, so the rebuild is one atomic lake commit.

Before the split is read, the job leases the snapshot for every bucket under
its persistent job id (Fluss PR 3286): retention cannot remove it while the
round reads it. The lease is released when the round finishes or fails;
a restarted job drops what its previous incarnation held (same id, so no
orphan lease survives). A server without leases answers "unsupported" and
the job carries on with a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.columns import table_columns
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.changelog import lake_write, planner
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.exceptions import TieringGuardError, UnknownProcedureError, UnsupportedFeatureError
from tierlake.server.kv import snapshot_catalog as kv
from tierlake.server.sqlapi.types import SqlMap

log = logging.getLogger("tierlake.tiering")

MAX_LEASE_ATTEMPTS = 3


@dataclass(frozen=True)
class SnapshotSplit:
    kv_table: str
    snapshot_id: int
    log_position: int
    stream_snapshot_id: int
    buckets: int


def plan_round(handle: TableHandle, exclude: frozenset[int] = frozenset(),
               registered: planner.Registered | None = None) -> planner.Plan:
    """Plan from the lake's position; from the newest KV snapshot when the log does not reach it."""
    try:
        return planner.plan_round(handle, registered=registered)
    except planner.LogTruncatedError as e:
        spec, stream = handle.spec, handle.stream
        if not spec.is_primary_key:
            raise
        log_start = P.read(handle.properties, P.LOG_START_PROPERTY)
        usable = [s for s in kv.KvCatalog(handle.spark).list(stream)
                  if s.log_position >= log_start and s.snapshot_id not in exclude]
        if not usable:
            raise TieringGuardError(
                f"{e.message}, and no retained KV snapshot of {stream} reaches the remaining log: the lake table "
                f"cannot be rebuilt (take KV snapshots with CALL sys.kv_snapshot('{stream}') before log retention "
                "removes the changelog)") from e
        snap = usable[-1]
        plan = planner.plan_round(handle, start=snap.log_position, registered=registered)
        plan.snapshot_split = SnapshotSplit(snap.kv_table, snap.snapshot_id, snap.log_position,
                                            snap.stream_snapshot_id, spec.buckets)
        log.info("%s: the log does not reach lake position; rebuilding from KV snapshot %d (log position %d)",
                 handle.lake, snap.snapshot_id, snap.log_position)
        return plan


def plan_and_lease(handle: TableHandle, leases: JobLeases,
                   registered: planner.Registered | None = None) -> planner.Plan:
    """Plan the round; lease its snapshot split's snapshot before anything reads it."""
    exclude: set[int] = set()
    for _ in range(MAX_LEASE_ATTEMPTS):
        plan = plan_round(handle, frozenset(exclude), registered)
        split = plan.snapshot_split
        if split is None or leases.acquire(handle.path, split):
            return plan
        # Expired between planning and the acquire: plan again with a newer one, from the tables as
        # they are now (retention that expired the snapshot may have moved the log start too).
        exclude.add(split.snapshot_id)
        handle.refresh()
    raise TieringGuardError(f"the KV snapshots of {handle.stream} kept expiring before they could be leased")


def write_split(plan: planner.Plan, split: SnapshotSplit, target: list[str], properties: dict[str, str]) -> None:
    """Replace the branch's rows with the snapshot's, as one commit carrying ``properties``."""
    spark = plan.handle.spark
    kv_path = TablePath(*split.kv_table.split(".", 1))
    if not spark.catalog.tableExists(kv_path.quoted) or load_table(spark, kv_path).snapshot(split.snapshot_id) is None:
        raise TieringGuardError(
            f"KV snapshot {split.snapshot_id} of {plan.stream} was expired before the round could read it "
            "(was its lease lost?); the next round uses a newer snapshot")
    lake_write.replace_with_snapshot(spark, kv_path, split.snapshot_id, target, table_columns(spark, plan.lake),
                                     properties)


def _unsupported(error: Exception) -> bool:
    if isinstance(error, (UnsupportedFeatureError, UnknownProcedureError)):
        return True
    text = str(error)
    return "0A000" in text or "leases are unsupported" in text or "unknown procedure sys.acquire_lease" in text


class JobLeases:
    """The leases of one tiering job: lease id = the persistent job id."""

    def __init__(self, client: Any, job_id: str):
        self.client, self.lease_id = client, job_id
        self.supported = True
        self.held: set[str] = set()

    def _call(self, procedure: str, **arguments: Any) -> list[tuple] | None:
        if not self.supported:
            return None
        try:
            return self.client.call(procedure, **arguments)
        except Exception as e:
            if _unsupported(e):
                self.supported = False
                log.warning("the coordinator does not support KV snapshot leases (%s); tiering snapshot splits "
                            "without them", str(e).splitlines()[0][:300])
                return None
            raise

    def acquire(self, path: str, split: SnapshotSplit) -> bool:
        """Lease the split's snapshot for every bucket; False if it is no longer available."""
        rows = self._call("acquire_lease", lease_id=self.lease_id, table=path,
                          snapshots=SqlMap({b: split.snapshot_id for b in range(split.buckets)}))
        if rows is None:
            return True
        self.held.add(path)
        return all(r[3] == "acquired" for r in rows)

    def release(self, path: str) -> None:
        """Best effort: a lease that cannot be released expires."""
        if path not in self.held:
            return
        try:
            self._call("release_lease", lease_id=self.lease_id, table=path)
            self.held.discard(path)
        except Exception:
            log.warning("could not release the KV snapshot lease of %s on %s", self.lease_id, path, exc_info=True)

    def drop_stale(self) -> None:
        """At start: what a previous incarnation of this job still held (it crashed mid-round)."""
        try:
            rows = [r for r in self._call("drop_lease", lease_id=self.lease_id) or () if r[3] == "released"]
            if rows:
                log.info("dropped %d KV snapshot lease entries left by a previous run of job %s",
                         len(rows), self.lease_id)
        except Exception:
            log.warning("could not drop stale leases of job %s", self.lease_id, exc_info=True)
