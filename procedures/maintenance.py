"""Managed maintenance of lake and stream tables: run it now, and the
tiering job's side (is it due, what it did)."""

from __future__ import annotations

from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.coordinator.maintenance_schedule import TRIGGERS, MaintenanceAction
from tierlake.server.coordinator.registration import coordinator, table_states
from tierlake.server.exceptions import InvalidArgumentError
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import ADMIN, TIERING

RUN_COLUMNS = [("table_path", "string"), ("target", "string"), ("kind", "string"), ("duration_ms", "bigint"),
               ("snapshots_expired", "bigint"), ("files_rewritten", "bigint"), ("delete_files_rewritten", "bigint"),
               ("files_added", "bigint"), ("orphans_removed", "bigint"), ("detail", "string"), ("error", "string")]


@registry.procedure(returns=RUN_COLUMNS, role=ADMIN)
def run_maintenance(ctx: Context, table: str):
    """Run the managed maintenance of a tiered table now and return what each action did.

    Maintenance (lake compaction, lake snapshot expiry, lake orphan files,
    stream compaction, stream snapshot expiry, stream orphan files) runs inside the table's tiering assignment, so the
    table is made due now and the call waits (tierlake.maintenance.run-timeout)
    until a tiering job has run it after its next round. One row per action;
    a failed action has its error and the others still ran.

    Args:
      table: the stream table, db.table
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    state = table_states(ctx, path)[0]
    schedule = coordinator(ctx).maintenance
    run_id = schedule.request(state.table_id)
    timeout = ctx.config.seconds("tierlake.maintenance.run-timeout") if ctx.config is not None else 300.0
    rows = schedule.wait(run_id, timeout)
    return [(str(path), r["target"], r["kind"], r["duration_ms"], r["snapshots_expired"], r["files_rewritten"],
             r["delete_files_rewritten"], r["files_added"], r["orphans_removed"], r["detail"], r["error"])
            for r in rows]


@registry.procedure(returns=[("due", "boolean"), ("run_trigger", "string"), ("run_id", "string"),
                             ("orphan_files", "boolean")], role=TIERING)
def maintenance_due(ctx: Context, job_id: str, table_id: int, tiering_epoch: int,
                    stream_data_files: int | None = None, lake_data_files: int | None = None):
    """A tiering job asks, between a round and its report, whether to maintain the table now.

    Only the job holding the table at that epoch gets an answer (else the
    error of a stale heartbeat entry); due when tierlake.maintenance.interval
    passed since the table's last maintenance (run_trigger 'scheduled'; a
    table with none in sys.lake_maintenance counts from its registration, so
    a new table's first round carries no maintenance), when
    the stream or the lake table gained 16 data files since then ('files'),
    or when sys.run_maintenance asked ('requested'); orphan_files says whether
    to include orphan-file removal (requested runs, else at most hourly per table).

    Args:
      job_id: the tiering job's persistent id
      table_id: the table it holds
      tiering_epoch: the epoch of its assignment
      stream_data_files: live data files of the stream table as the job last saw it (NULL: not known)
      lake_data_files: live data files of the lake table as the job last saw it (NULL: not known)
    """
    if not job_id.strip():
        raise InvalidArgumentError("parameter 'job_id' must not be empty")
    for name, value in (("stream_data_files", stream_data_files), ("lake_data_files", lake_data_files)):
        if value is not None and value < 0:
            raise InvalidArgumentError(f"parameter '{name}' must not be negative, got {value}")
    return [coordinator(ctx).maintenance.due(job_id, table_id, tiering_epoch, stream_data_files, lake_data_files)]


@registry.procedure(returns=[("recorded", "int")], role=TIERING)
def record_maintenance(ctx: Context, job_id: str, table_id: int, tiering_epoch: int, run_id: str,
                       run_trigger: str, actions: list[MaintenanceAction] = ()):
    """A tiering job reports a maintenance run: one row per action in sys.lake_maintenance.

    Args:
      job_id: the tiering job's persistent id
      table_id: the table maintained
      tiering_epoch: the epoch of the assignment it ran in
      run_id: the id sys.maintenance_due gave the run
      run_trigger: scheduled, files or requested (what sys.maintenance_due answered)
      actions: one struct per action: kind, target, started_ms, duration_ms, the counts, detail, error
    """
    if run_trigger not in TRIGGERS:
        raise InvalidArgumentError(
            f"parameter 'run_trigger' must be one of {', '.join(map(repr, TRIGGERS))}, got {run_trigger!r}")
    return [(coordinator(ctx).maintenance.record(job_id, table_id, tiering_epoch, run_id, run_trigger,
                                                 list(actions)),)]
