"""Managed maintenance of a lake table and its stream table (docs/design.md, 'Running for months').

Runs in a tiering worker inside the table's assignment, after a round and
before the round is reported finished (:func:`after_round`), so no round of
the same table runs meanwhile; the coordinator says when it is due
(``server/coordinator/maintenance_schedule.py``). Each action runs on its
own: one failing is recorded with its error and the others still run, and
nothing here ever fails the round.

Actions, in order:

- ``compaction`` (``table.datalake.auto-compaction``, default on): when the
  lake's current snapshot has at least :data:`COMPACT_MIN_FILES` data files or
  any merge-on-read delete file, Iceberg's ``rewriteDataFiles`` bin-packs
  file groups of at least :data:`COMPACT_MIN_FILES` small files (smaller than
  75 % of ``write.target-file-size-bytes``) and rewrites every data file that
  has a delete file, dropping the deletes that no longer apply. Its
  ``replace`` commit carries the tiering summary of the snapshot it
  compacted, so the tiered position stays on the newest snapshot.
- ``expire_snapshots`` of the lake: older than ``table.datalake.snapshot.max-age``,
  beyond the newest ``table.datalake.snapshot.min-retained``, never the
  newest snapshot carrying the tiered position nor anything newer; tagged
  snapshots stay (Iceberg keeps what a ref retains).
- ``orphan_files`` of the lake: files older than an hour no snapshot
  references (it lists the table's location: when requested, else at most
  hourly per table).
- ``stream_compaction`` (the same property; at least :data:`COMPACT_MIN_FILES`
  data files): small data files of the stream bin-packed by Iceberg's
  ``rewriteDataFiles``, each partition's group from
  :data:`STREAM_GROUP_MIN_FILES` files. Its ``replace``
  commit (``tierlake.maintenance = compaction``) is one planning already
  carries: a round reads the files each append added, whatever replaced
  them since (server/changelog/planner.py), so nothing is tiered twice or
  lost, un-tiered rows included. Skipped while the stream has merge-on-read
  delete files: those come from a user ``DELETE`` that fails the table, and
  its repair (``sys.drop_stream_commit``) must see the rows as they were.
- ``kv_snapshot`` (primary-key tables): a KV snapshot when the newest one
  holds back more than ``table.datalake.stream.max-snapshots`` tiered stream
  snapshots (:func:`kv_snapshot_for_bound`); ``kv_compaction`` (with
  compaction on): the KV table's files compacted, the result registered as
  a KV snapshot at the same position.
- ``stream_expire_snapshots``: stream snapshots older than the max age or
  beyond the newest ``table.datalake.stream.max-snapshots``, whose commits
  are tiered and that neither the newest KV snapshot nor a leased one needs
  (the log-retention bound), beyond the newest ``min-retained``; the request
  ids they carry are written to ``sys.write_requests`` first
  (server/ingest/ledger.py);
  the table's fresh view is re-pinned to the tiered position first (its
  incremental read needs the snapshot it starts after), and if that fails
  every stream snapshot is kept this time.
- ``stream_orphan_files``: like ``orphan_files``, on the stream, for files
  older than :data:`STREAM_ORPHAN_MIN_AGE_MS` (Iceberg's own default of 3
  days: users' writes go to the stream, and one may still be running long
  after its first file was written).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.positions import lake_position
from tierlake.server.changelog.positions import summary as _summary
from tierlake.server.coordinator.maintenance_schedule import MaintenanceAction
from tierlake.server.ingest import ledger
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.kv import snapshot_catalog as kv
from tierlake.server.kv.log_retention import needed_after
from tierlake.server.kv.snapshot_catalog import kv_table_of
from tierlake.server.kv.snapshots import compact_kv_table, take_snapshot_of
from tierlake.server.maintenance.kv_tables import snapshot_interval
from tierlake.server.observability import metrics
from tierlake.server.runtime import iceberg_actions as im
from tierlake.server.runtime.jvm import jclass

log = logging.getLogger("tierlake.maintenance")

COMPACT_MIN_FILES = 5
# The shortest time between two KV snapshots taken because the newest one held
# back too many stream snapshots (each costs a MERGE of the delta).
KV_PRESSURE_MIN_GAP_S = 30
STREAM_GROUP_MIN_FILES = 2
ORPHAN_MIN_AGE_MS = 3600 * 1000
STREAM_ORPHAN_MIN_AGE_MS = 3 * 24 * 3600 * 1000
TIERING_SUMMARY_PREFIX = "tiering."


# The record a run reports is the coordinator's (sys.record_maintenance takes it
# as a struct); a run fills it in as its action goes.
Action = MaintenanceAction


def _main_ancestry(table: Any) -> list[Any]:
    """Snapshots of ``main``, newest first (expired parents end the walk)."""
    out, snapshot = [], table.currentSnapshot()
    while snapshot is not None:
        out.append(snapshot)
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None
    return out


@dataclass(frozen=True)
class Ancestor:
    snapshot_id: int
    sequence_number: int
    timestamp_ms: int


def _ancestry(spark: Any, table: Any) -> list[Ancestor]:
    """:func:`_main_ancestry` as plain values, read in one JVM call."""
    rows = json.loads(str(jclass(STREAM_INGEST, spark.sparkContext._jvm).mainAncestry(table)))
    return [Ancestor(*row) for row in rows]


def newest_tiering_snapshot(table: Any) -> Any:
    """The newest snapshot on ``main`` whose summary carries the tiered position."""
    return next((s for s in _main_ancestry(table) if P.SOURCE_POSITION in _summary(s)), None)


def _timed(kind: str, target: TablePath, body: Callable[[Action], None]) -> Action:
    action = Action(kind, str(target), started_ms=int(time.time() * 1000), duration_ms=0)
    started = time.monotonic()
    try:
        body(action)
    except Exception as e:  # noqa: BLE001 - recorded with the run; the other actions still run
        action.error = f"{type(e).__name__}: {e}"[:2048]
        log.warning("maintenance %s of %s failed\n%s", kind, target, traceback.format_exc())
    action.duration_ms = int((time.monotonic() - started) * 1000)
    return action


def compact_lake(handle: TableHandle, action: Action) -> None:
    lake_table = handle.fresh_lake()
    files, deletes = im.data_file_counts(lake_table)
    if files < COMPACT_MIN_FILES and not deletes:
        action.detail = f"skipped: {files} data file(s), no delete files"
        return
    tiering = newest_tiering_snapshot(lake_table)
    carried = {k: v for k, v in _summary(tiering).items() if k.startswith(TIERING_SUMMARY_PREFIX)} if tiering else {}
    # The tiered position is carried only when nothing was committed after
    # the tiering snapshot (a user's commit in between keeps its own meaning).
    if tiering is None or int(tiering.snapshotId()) != int(lake_table.currentSnapshot().snapshotId()):
        carried = {}
    # use-starting-sequence-number off: the rewritten files get the rewrite's own
    # sequence number, newer than every delete file, so remove-dangling-deletes
    # drops them all. With Iceberg's default the files keep the starting
    # snapshot's number, and the deletes of that snapshot (the last round's
    # MERGE) stayed: "delete files 8 -> 4". Safe here: no round of the table
    # runs during its maintenance, and a conflicting user DELETE fails the rewrite.
    done = im.compact(handle.spark, lake_table, {
        "min-input-files": str(COMPACT_MIN_FILES), "delete-file-threshold": "1",
        "remove-dangling-deletes": "true", "use-starting-sequence-number": "false"},
        {**carried, P.MAINTENANCE: "compaction"})
    after_files, after_deletes = im.data_file_counts(handle.fresh_lake())
    action.files_rewritten, action.files_added = done.files_rewritten, done.files_added
    action.delete_files_rewritten = max(done.delete_files_removed, deletes - after_deletes)
    action.detail = f"data files {files} -> {after_files}, delete files {deletes} -> {after_deletes}"


def compact_stream(handle: TableHandle, action: Action) -> None:
    stream_table = handle.fresh_stream()
    files, deletes = im.data_file_counts(stream_table)
    if deletes:
        action.detail = f"skipped: {deletes} delete file(s) from a user change (see sys.drop_stream_commit)"
        return
    if files < COMPACT_MIN_FILES:
        action.detail = f"skipped: {files} data file(s)"
        return
    # Each append adds a file per bucket it touches: a partition's group is
    # rewritten from two small files, so a run leaves about one file per
    # bucket (with five, up to four per bucket stayed behind each run).
    # With metastore locks: the table's committers hold back for the commit (session.LOCKING_CATALOG).
    done = im.compact(handle.spark, handle.locking_stream, {"min-input-files": str(STREAM_GROUP_MIN_FILES)},
                      {P.MAINTENANCE: "compaction"})
    after_files, _ = im.data_file_counts(handle.fresh_stream())
    action.files_rewritten, action.files_added = done.files_rewritten, done.files_added
    action.detail = f"data files {files} -> {after_files}"


def expire_lake(handle: TableHandle, max_age_ms: int, keep: int, action: Action) -> None:
    # The fresh view reads the lake snapshot it was pinned to; its re-pin runs after the
    # round's report, i.e. after this (server/changelog/fresh_view.py). Re-pinned first, and
    # whatever it pins then kept (its re-pin may fail; a newer one never moves it back).
    try:
        fresh_view.refresh(handle)
    except Exception:  # the snapshot it still pins is kept below
        log.warning("could not re-pin the fresh view of %s before expiring %s", handle.stream, handle.lake,
                    exc_info=True)
    lake_table = handle.fresh_lake()
    cutoff = int(time.time() * 1000) - max_age_ms
    tiering = newest_tiering_snapshot(lake_table)
    if tiering is not None:
        cutoff = min(cutoff, int(tiering.timestampMillis()))
    pinned = fresh_view.pinned_lake_snapshot(handle)
    if pinned is not None and lake_table.snapshot(pinned) is not None:
        # Iceberg expires snapshots strictly older than the cutoff: the pinned one and newer stay.
        cutoff = min(cutoff, int(lake_table.snapshot(pinned).timestampMillis()))
    action.snapshots_expired = im.expire_snapshots(handle.spark, lake_table, cutoff, keep)
    action.detail = f"{im.snapshot_count(handle.fresh_lake())} snapshot(s) kept"


def remove_orphans(spark: Any, table: Any, min_age_ms: int, action: Action) -> None:
    action.orphans_removed = im.remove_orphans(spark, table, int(time.time() * 1000) - min_age_ms)


def expire_stream(handle: TableHandle, position: int, max_age_ms: int, keep: int, action: Action) -> None:
    spark, stream, props = handle.spark, handle.stream, handle.properties
    # The fresh view reads the stream after the snapshot it was pinned to
    # (server/changelog/fresh_view.py): normally the tiered position's,
    # but a round whose refresh failed left it further back, and expiring
    # the snapshots after it would break the view. Re-pin it here.
    try:
        pin = fresh_view.refresh(handle)
        if pin is not None:  # the pin in force (another process's may be newer, never older)
            position = min(position, pin)
    except Exception as e:  # recorded in the action's detail
        action.snapshots_expired = 0
        action.detail = f"kept all: the fresh view could not be re-pinned ({type(e).__name__}: {e})"[:2048]
        log.warning("stream snapshots of %s kept: its fresh view could not be re-pinned", stream, exc_info=True)
        return
    tiered = lake_position(handle.fresh_lake())[0]
    bound = min(position, needed_after(spark, stream, props, tiered, datetime.now(timezone.utc)))
    stream_table = handle.locking_stream
    ancestry = _ancestry(spark, stream_table)
    needed = next((s for s in ancestry if s.sequence_number <= bound), None)
    if needed is None:
        action.snapshots_expired = 0
        action.detail = f"kept all: nothing at or before position {bound} (tiered, and no KV snapshot needs it)"
        return
    # Older than the max age, or beyond the newest max-snapshots: whichever
    # expires more (a write rate of many commits a second would otherwise
    # keep a day of them in every metadata file). Never the snapshot at the
    # bound (planning walks back to it) nor anything newer, never the newest
    # min-retained: all in the cutoff, so a commit landing during the expiry
    # (newer than the cutoff) cannot change which snapshots it removes, and
    # the request ids recorded first are exactly those of the removed ones.
    cutoff = int(time.time() * 1000) - max_age_ms
    most = P.read(props, P.STREAM_MAX_SNAPSHOTS)
    if len(ancestry) > most:
        cutoff = max(cutoff, ancestry[most - 1].timestamp_ms)
    # Every snapshot from the bound on stays, whatever its timestamp. Iceberg retains main's
    # snapshots walking back from its head and stops at the first one older than the cutoff, and an
    # outside appender whose clock is behind (Iceberg accepts a commit up to a minute before the
    # last) makes a snapshot older than its parent: a cutoff at the bound's own timestamp expired
    # such an untiered commit, and the next round found the changelog truncated.
    cutoff = min([cutoff] + [s.timestamp_ms for s in ancestry if s.sequence_number >= needed.sequence_number])
    if len(ancestry) >= keep:
        cutoff = min(cutoff, ancestry[keep - 1].timestamp_ms)
    recorded = []
    keep_for = ledger.retention(handle.config)

    def record(removed: Any) -> None:
        recorded.append(ledger.record_expiring(spark, stream_table, removed, keep_for))

    action.snapshots_expired = im.expire_snapshots(spark, stream_table, cutoff, keep, before_commit=record)
    kept = im.snapshot_count(handle.fresh_stream())
    action.detail = f"kept position {bound} and after; {kept} snapshot(s) kept"
    if recorded and recorded[0]:
        action.detail += f"; {recorded[0]} request id(s) moved to {ledger.LEDGER}"


def kv_snapshot_for_bound(handle: TableHandle, position: int, action: Action) -> None:
    """A KV snapshot now when the newest one holds back more than
    ``table.datalake.stream.max-snapshots`` tiered stream snapshots, at most
    every :data:`KV_PRESSURE_MIN_GAP_S`: a primary-key stream keeps its
    changelog back to the newest KV snapshot (the state can be rebuilt from
    it), which at a high write rate is many snapshots between periodic ones.
    Not with ``kv.snapshot.interval = 0`` (KV snapshots only on demand)."""
    spark, stream, props = handle.spark, handle.stream, handle.properties
    if snapshot_interval(props, handle.config).total_seconds() <= 0:
        action.detail = "skipped: kv.snapshot.interval is 0"
        return
    catalog = kv.KvCatalog(spark)
    newest = catalog.newest(stream)
    since = 0 if newest is None else newest.log_position
    if newest is not None and (kv.utcnow() - newest.created_at).total_seconds() < KV_PRESSURE_MIN_GAP_S:
        action.detail = "skipped: the newest KV snapshot is recent"
        return
    held = sum(1 for s in _ancestry(spark, handle.fresh_stream())
               if since < s.sequence_number <= position)
    most = P.read(props, P.STREAM_MAX_SNAPSHOTS)
    if held <= most:
        action.detail = f"skipped: {held} tiered stream snapshot(s) after the newest KV snapshot"
        return
    snap, created = take_snapshot_of(handle, catalog)
    action.detail = (f"KV snapshot {snap.snapshot_id} at position {snap.log_position}: {held} tiered stream "
                     f"snapshot(s) were held back (more than {most})" if created else "nothing new")


def compact_kv(handle: TableHandle, kv_path: TablePath, action: Action) -> None:
    done = compact_kv_table(handle.spark, handle.stream, kv_path)
    if done is None:
        action.detail = "skipped: nothing to compact"
        return
    action.files_rewritten, action.files_added = done
    action.detail = f"data files {done[0]} rewritten into {done[1]}"


def maintain(handle: TableHandle, position: int, orphans: bool = True) -> list[Action]:
    """Run every action on the handle's table; see the module docstring."""
    stream, lake, props = handle.stream, handle.lake, handle.properties
    max_age_ms = int(P.read(props, P.SNAPSHOT_MAX_AGE).total_seconds() * 1000)
    keep = P.read(props, P.SNAPSHOT_MIN_RETAINED)
    compaction = P.read(props, P.AUTO_COMPACTION)
    actions = []
    # Users' INSERTs commit to the stream, each writing a new metadata.json:
    # without these properties Iceberg keeps every one of them.
    for target, loaded in ((lake, handle.fresh_lake), (stream, handle.fresh_stream)):
        try:
            im.bound_metadata(loaded())
        except Exception:
            log.warning("could not set metadata properties of %s", target, exc_info=True)
    if compaction:
        actions.append(_timed("compaction", lake, lambda a: compact_lake(handle, a)))
    actions.append(_timed("expire_snapshots", lake, lambda a: expire_lake(handle, max_age_ms, keep, a)))
    if orphans:
        actions.append(_timed("orphan_files", lake,
                              lambda a: remove_orphans(handle.spark, handle.fresh_lake(), ORPHAN_MIN_AGE_MS, a)))
    if compaction:
        actions.append(_timed("stream_compaction", stream, lambda a: compact_stream(handle, a)))
    if handle.spec.is_primary_key:
        actions.append(_timed("kv_snapshot", stream, lambda a: kv_snapshot_for_bound(handle, position, a)))
        # Read again: the snapshot just taken may have created the KV table.
        kv_path = kv_table_of(handle.current_properties())
        if compaction and kv_path is not None:
            actions.append(_timed("kv_compaction", kv_path, lambda a: compact_kv(handle, kv_path, a)))
    actions.append(_timed("stream_expire_snapshots", stream,
                          lambda a: expire_stream(handle, position, max_age_ms, keep, a)))
    if orphans:
        actions.append(_timed("stream_orphan_files", stream,
                              lambda a: remove_orphans(handle.spark, handle.fresh_stream(), STREAM_ORPHAN_MIN_AGE_MS,
                                                       a)))
    return actions


def _assigned(handle: TableHandle) -> dict[str, Any]:
    """The handle's assignment as the maintenance procedures take it."""
    assignment = handle.assignment
    return {"job_id": assignment.job_id, "table_id": assignment.table_id, "tiering_epoch": assignment.epoch}


def after_round(handle: TableHandle, client: Any, position: int) -> list[Action] | None:
    """The worker's hook between a round and its report: maintenance of the handle's table if due.

    Never raises: maintenance never fails a round."""
    stream = handle.stream
    try:
        counts = handle.data_files()  # the stream's and the lake's live data files as the round saw them
        files = {} if counts is None else {"stream_data_files": counts[0], "lake_data_files": counts[1]}
        rows = client.call("maintenance_due", **_assigned(handle), **files)
        due, trigger, run_id, orphans = rows[0][0], rows[0][1], rows[0][2], rows[0][3]
        if not due:
            return None
        started = time.monotonic()
        actions = maintain(handle, position, orphans=bool(orphans))
        client.call("record_maintenance", **_assigned(handle),
                    run_id=run_id, run_trigger=trigger, actions=[asdict(a) for a in actions])
        metrics.maintenance_ran(stream, actions)
        log.info("maintenance of %s (%s, %.1f s): %s", stream, trigger, time.monotonic() - started,
                 "; ".join(f"{a.kind} ({a.duration_ms / 1000:.1f} s): {a.error or a.detail or 'done'}"
                           for a in actions))
        return actions
    except Exception:
        log.warning("maintenance of %s could not run", stream, exc_info=True)
        return None
