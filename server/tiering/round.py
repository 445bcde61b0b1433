"""Run a planned round: statements rendered from ``sql/templates`` write the
delta into a branch of the lake table; ``main`` moves to it by fast-forward.

Fast-forward is the lake commit and a compare-and-set: it fails when ``main``
moved since the round was planned, so a worker whose table was reassigned
(and tiered by another worker) can never commit a duplicate. The epoch is
checked once more just before it, through the coordinator.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from tierlake import sql
from tierlake.server.runtime import faults
from tierlake.server.exceptions import FencedEpochError, TieringGuardError
from tierlake.server.quality.gate import QualityGate
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.changelog.planner import SOURCE_POSITION, SOURCE_SNAPSHOT, Chunk, Plan
from tierlake.server.catalog.spec import CHANGE_TYPE, Column, data_columns

log = logging.getLogger("tierlake.tiering")

T_LOG_APPEND = "templates/tiering_log_append.sql.j2"
T_PK_MERGE = "templates/tiering_pk_merge.sql.j2"
T_STREAM_FILES = "templates/stream_files.sql.j2"
T_ADD_COLUMNS = "templates/lake_add_columns.sql.j2"
BRANCH_PREFIX = "tierlake_"
COMMIT_USER = "tierlake"


@dataclass
class RoundResult:
    end_position: int
    rows: int = 0
    bytes: int = 0
    files: int = 0
    force_finished: bool = False
    commits: int = 0


class _Callable:
    """A Python function as a java.util.concurrent.Callable (py4j callback)."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.error: BaseException | None = None

    def call(self):
        try:
            self.fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the Python side
            self.error = e
            raise
        return None

    class Java:
        implements = ["java.util.concurrent.Callable"]


def with_commit_properties(spark: Any, properties: dict[str, str], fn: Callable[[], Any]) -> None:
    """Run ``fn`` (SQL writes) so that its Iceberg commits carry ``properties``.

    SQL MERGE/INSERT have no write options; Iceberg's CommitMetadata sets
    thread-local snapshot properties around a Callable (pinned-thread py4j
    keeps the Python thread on one JVM thread).
    """
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(key, value)
    callable_ = _Callable(fn)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            props, callable_, jvm.java.lang.Class.forName("java.lang.RuntimeException")
        )
    except Exception:
        if callable_.error is not None:
            raise callable_.error from None
        raise


def columns_of(schema: Any) -> list[Column]:
    return [Column(f.name, f.dataType.simpleString()) for f in schema.fields]


def sync_lake_schema(spark: Any, plan: Plan) -> None:
    """Carry added stream columns to the lake; refuse incompatible changes."""
    stream_cols = data_columns(columns_of(spark.table(plan.stream.quoted).schema))
    lake_cols = {c.name.lower(): c for c in columns_of(spark.table(plan.lake.quoted).schema)}
    missing = [c for c in stream_cols if c.name.lower() not in lake_cols]
    for c in stream_cols:
        lake = lake_cols.get(c.name.lower())
        if lake is not None and lake.type != c.type:
            raise TieringGuardError(
                f"column {c.name} of stream table {plan.stream} is {c.type} but {lake.type} in lake table "
                f"{plan.lake}; change the lake table's column type (ALTER TABLE {plan.lake} ALTER COLUMN "
                f"{c.name} TYPE {c.type}) if Iceberg allows the promotion, then CALL sys.retry_tiering('{plan.stream}')"
            )
    if missing:
        spark.sql(sql.render_checked(T_ADD_COLUMNS, table=[plan.lake.database, plan.lake.table], columns=missing))
        log.info("added columns %s to lake table %s", [c.name for c in missing], plan.lake)


def _delta(spark: Any, plan: Plan, chunk: Chunk) -> Any:
    reader = spark.read.format("iceberg")
    if chunk.start_snapshot_id is None:
        reader = reader.option("snapshot-id", str(chunk.end_snapshot_id))
    else:
        reader = (reader.option("start-snapshot-id", str(chunk.start_snapshot_id))
                  .option("end-snapshot-id", str(chunk.end_snapshot_id)))
    return reader.load(plan.stream.quoted).selectExpr("*", "_file", "_pos")


def run_round(
    spark: Any,
    plan: Plan,
    table_id: int,
    epoch: int,
    job_id: str,
    check_epoch: Callable[[], None],
    max_duration_s: float,
    chunk_rows: int,
    hook: Callable[[str], None] | None = None,
) -> RoundResult:
    """Tier ``plan`` into the lake; see the module docstring for the protocol.

    ``hook`` is called with the name of each step (tests pause a worker there).
    """

    def point(name: str) -> None:
        faults.point(name)
        if hook is not None:
            hook(name)

    started = time.monotonic()
    result = RoundResult(end_position=plan.lake_position)
    if plan.empty:
        return result
    sync_lake_schema(spark, plan)
    lake = iceberg_table(spark, plan.lake.quoted)
    branch = f"{BRANCH_PREFIX}{table_id}_{epoch}_{uuid.uuid4().hex[:8]}"
    _drop_stale_branches(lake, table_id)
    manage = lake.manageSnapshots()
    (manage.createBranch(branch, plan.lake_snapshot_id) if plan.lake_snapshot_id is not None
     else manage.createBranch(branch)).commit()
    # On a lake whose main had no snapshot when planned, createBranch bases
    # the branch on whatever main is *now*; the fast-forward CAS only holds if
    # the branch starts exactly where the plan did.
    current = iceberg_table(spark, plan.lake.quoted)
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
        iceberg_table(spark, plan.lake.quoted).manageSnapshots().removeBranch(branch).commit()
        raise FencedEpochError(
            f"lake table {plan.lake} changed since this round (epoch {epoch}) was planned; "
            "another worker committed first, this round's writes are discarded"
        )
    stream_cols = columns_of(spark.table(plan.stream.quoted).schema)
    columns = [c.name for c in data_columns(stream_cols)]
    target = [plan.lake.database, plan.lake.table, f"branch_{branch}"]
    suffix = uuid.uuid4().hex[:12]
    delta_view, files_view = f"__tierlake_delta_{suffix}", f"__tierlake_files_{suffix}"
    branch_dropped = False
    gate = QualityGate(spark, plan, table_id, epoch)  # table.datalake.quality (server/quality/gate.py)
    try:
        chunks = plan.chunks(chunk_rows)
        for index, chunk in enumerate(chunks):
            if chunk.snapshot is None:
                _delta(spark, plan, chunk).createOrReplaceTempView(delta_view)
            if chunk.snapshot is not None:  # a KV snapshot split: written by write_split below
                statement = None
            elif plan.spec.is_primary_key:
                bucket_field = next((str(f.name()) for f in iceberg_table(spark, plan.stream.quoted).spec().fields()
                                     if str(f.transform().toString()).startswith("bucket")), None)
                spark.sql(
                    sql.render_checked(T_STREAM_FILES, entries=[plan.stream.database, plan.stream.table, "entries"],
                               bucket_field=bucket_field),
                    args={"start_position": chunk.start_position, "end_position": chunk.end_position},
                ).createOrReplaceTempView(files_view)
                statement = sql.render_checked(T_PK_MERGE, target=target, delta=delta_view, files=files_view,
                                       columns=columns, keys=plan.spec.primary_key,
                                       sequence_by=plan.spec.sequence_by, change_type=CHANGE_TYPE)
            else:
                statement = sql.render_checked(T_LOG_APPEND, target=target, delta=delta_view, columns=columns)
            point("after-plan")
            properties = {
                "tiering.table-id": str(table_id),
                "tiering.epoch": str(epoch),
                SOURCE_POSITION: str(chunk.end_position),
                SOURCE_SNAPSHOT: str(chunk.end_snapshot_id),
                "tiering.job-id": job_id,
                "commit-user": COMMIT_USER,
            }
            point("during-write")
            if chunk.snapshot is not None:
                from tierlake.server.tiering.snapshot_split import write_split

                write_split(spark, plan, chunk.snapshot, target, properties)
            else:
                with_commit_properties(spark, properties, lambda: spark.sql(statement))
            gate.before_publish(branch, chunk)  # block mode: a failing branch is never published
            point("before-commit")
            check_epoch()
            last = index == len(chunks) - 1 or time.monotonic() - started >= max_duration_s
            try:
                manage = iceberg_table(spark, plan.lake.quoted).manageSnapshots().fastForwardBranch("main", branch)
                if last:
                    manage = manage.removeBranch(branch)  # one metadata commit instead of two
                manage.commit()
                branch_dropped = last
            except Exception as e:  # noqa: BLE001 - py4j-wrapped ValidationException
                if "not an ancestor" in str(e) or "Cannot fast-forward" in str(e):
                    raise FencedEpochError(
                        f"lake table {plan.lake} changed while this round (epoch {epoch}) ran; "
                        "another worker committed first, this round's writes are discarded"
                    ) from e
                raise
            point("after-lake-commit")
            result.end_position = chunk.end_position
            result.rows += sum(c.rows for c in chunk.commits)
            result.bytes += sum(c.bytes for c in chunk.commits)
            result.files += sum(c.files for c in chunk.commits)
            result.commits += 1
            if last and index < len(chunks) - 1:
                result.force_finished = True
                log.info("round of %s reached its maximum duration after %d of %d chunks",
                         plan.stream, index + 1, len(chunks))
                break
    finally:
        spark.catalog.dropTempView(delta_view)
        spark.catalog.dropTempView(files_view)
        if not branch_dropped:
            try:
                iceberg_table(spark, plan.lake.quoted).manageSnapshots().removeBranch(branch).commit()
            except Exception:  # noqa: BLE001 - a leftover branch is dropped by the next round
                log.warning("could not drop branch %s of %s", branch, plan.lake, exc_info=True)
    gate.after_round(result.commits, result.end_position)  # warn mode: validate what was published
    return result


def _drop_stale_branches(lake: Any, table_id: int) -> None:
    """Branches of earlier, crashed rounds (their data never reached main)."""
    prefix = f"{BRANCH_PREFIX}{table_id}_"
    stale = [str(name) for name in lake.refs().keySet() if str(name).startswith(prefix)]
    if stale:
        manage = lake.manageSnapshots()
        for name in stale:
            manage = manage.removeBranch(name)
        manage.commit()
        log.info("dropped stale tiering branches %s", stale)
