"""The one lake-write path: apply a changelog range of a stream table to an
Iceberg table, as one commit carrying commit properties.

Tiering rounds (into a branch of the lake table), KV snapshots (into the KV
table) and snapshot splits (a KV snapshot replacing a branch's rows) all
write through here, so the statements rendered from ``sql/templates`` and
the way their commits are tagged exist once.

A log table's range is appended; a primary-key table's range is merged
(``tiering_pk_merge``; into an empty branch, appended: ``tiering_pk_load``):
the newest change of each key wins, ordered by commit
(the data sequence number of the stream's data files, listed by
:func:`chunk_files`), then ``sequence-by``. The MERGE itself enforces the
changelog rule (unknown change types, NULL keys, changes it cannot order
fail it before anything is committed); :mod:`.validation` then explains the
failure.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tierlake import sql
from tierlake.server.catalog import reads
from tierlake.server.catalog.columns import bucket_field
from tierlake.server.catalog.spec import CHANGE_TYPE, CHANGE_TYPES, Column
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import file_copy, lake_schema, validation, write_strategy
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.lake_schema import Carried
from tierlake.server.changelog.planner import Chunk
from tierlake.server.changelog.write_strategy import WriteStrategy
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.jvm_errors import Kind, failure, is_, raised_by_sql

log = logging.getLogger("tierlake.tiering")

T_LOG_APPEND = "templates/tiering_log_append.sql.j2"
T_PK_MERGE = "templates/tiering_pk_merge.sql.j2"
T_PK_LOAD = "templates/tiering_pk_load.sql.j2"
# The statement of each strategy ChangelogWrite runs (write_strategy.py chooses).
STATEMENTS = {WriteStrategy.LOG_APPEND: T_LOG_APPEND, WriteStrategy.PK_MERGE: T_PK_MERGE,
              WriteStrategy.PK_LOAD: T_PK_LOAD}
T_STREAM_FILES = "templates/stream_files.sql.j2"
COMMIT_USER = "tierlake"

# Storage-partitioned join for the primary-key MERGE: a stream table and its
# lake table are bucketed alike by the primary key (create_lake_table.sql.j2),
# so Spark can keep the buckets the scans report instead of shuffling the
# chunk (for the dedup's windows) and the whole lake table (for the join) by
# key. Spark reads these at planning time; where the two sides are not
# bucketed alike (another lake partitioning, another bucket count, a chunk
# read as a union of two scans) it plans the shuffles as without them.
BUCKETED_MERGE_CONF = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.sources.v2.bucketing.pushPartValues.enabled": "true",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    "spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled": "false",
}


_bucketed_lock = threading.Lock()
_bucketed_users: dict[int, tuple[int, dict[str, str | None]]] = {}  # id(session): (statements, values before)


@contextmanager
def bucketed_merge(spark: Any) -> Iterator[None]:
    """:data:`BUCKETED_MERGE_CONF` on ``spark`` while any statement in it needs it.

    The settings are session-wide (a per-statement hint does not exist). A
    tiering round runs in a session of its own (``session.private_session``,
    one per round thread), so no other round, no client session and not the
    round's own retry without them plans under them. Where threads share a
    session (an atomic CTAS in the server's), the first statement sets them
    and the last one restores what was there before.
    """
    key = id(spark)
    with _bucketed_lock:
        count, before = _bucketed_users.get(key, (0, {}))
        if count == 0:
            before = {k: spark.conf.get(k, None) for k in BUCKETED_MERGE_CONF}
            for k, v in BUCKETED_MERGE_CONF.items():
                spark.conf.set(k, v)
        _bucketed_users[key] = (count + 1, before)
    try:
        yield
    finally:
        with _bucketed_lock:
            count, before = _bucketed_users.pop(key)
            if count > 1:
                _bucketed_users[key] = (count - 1, before)
            else:
                restore(spark, before)


def restore(spark: Any, values: dict[str, str | None]) -> None:
    """Set ``values`` on ``spark``'s session; None unsets a key."""
    for k, v in values.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


class _Callable:
    """A Python function as a java.util.concurrent.Callable (py4j callback)."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.error: BaseException | None = None

    def call(self):
        try:
            self.fn()
        except BaseException as e:
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
    props = jclass("java.util.HashMap", jvm)()
    for key, value in properties.items():
        props.put(key, value)
    callable_ = _Callable(fn)
    try:
        jclass("org.apache.iceberg.spark.CommitMetadata", jvm).withCommitProperties(
            props, callable_, jclass("java.lang.Class", jvm).forName("java.lang.RuntimeException")
        )
    except Exception:
        if callable_.error is not None:
            raise callable_.error from None
        raise


def sync_lake_schema(handle: TableHandle) -> list[Carried]:
    """Carry the stream's added, renamed and dropped columns to the handle's lake (or KV)
    table (:mod:`~tierlake.server.changelog.lake_schema`); the columns a write fills."""
    return lake_schema.sync_lake_schema(handle)


def _changes(handle: TableHandle, changes: Chunk, columns: list[Carried]) -> Any:
    """The stream rows committed in ``changes`` as ``columns`` (by field id), with their ``_file`` and ``_pos``.

    Each append's own data files are read (Iceberg's incremental append scan
    reads the manifests the appends wrote), never the table's current file
    list: a ``replace`` commit (compaction, a manifest rewrite) during the
    round or inside its range changes nothing that is read. A range from the
    table's first snapshot has no parent to start an incremental scan after:
    it is read as of its end snapshot (as of its first, plus the increment
    after it, when a replace commit inside it rewrote files), with that
    snapshot's schema; projecting by field id gives every part
    the current columns (NULL where the read schema lacks them) under the
    lake's names.

    The stream table is the handle's, as the round planned it. A snapshot's
    schema never changes; for the incremental read, which uses the schema the
    stream has when the frame is made, its current schema is used only if the
    frame's columns are exactly its columns (names, in order), else the table
    is refreshed: a rename or drop since the plan cannot map a field id onto
    another column's values.
    """
    spark, stream, table = handle.spark, handle.stream, handle.stream_table
    start, end, parts = changes.start_snapshot_id, changes.end_snapshot_id, []
    if start is None:
        # With no replace commit in the range, the table as of the end snapshot holds exactly the
        # range's appends: one scan (a union of two scans loses the buckets a bucketed MERGE keeps,
        # see BUCKETED_MERGE_CONF).
        start = end if not changes.rewritten or not changes.commits else changes.commits[0].snapshot_id
        frame = reads.at_snapshot(spark, stream, start)
        parts.append(lake_schema.project(frame, lake_schema.read_fields(table, start), columns))
    if start != end:
        frame = reads.between(spark, stream, start, end)
        fields = lake_schema.read_fields(table, None)
        if list(fields.values()) != frame.columns:
            fields = lake_schema.read_fields(handle.fresh_stream(), None)
        parts.append(lake_schema.project(frame, fields, columns))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def read_changes(handle: TableHandle, changes: Chunk, columns: list[Carried]) -> Any:
    """The rows a write of ``changes`` reads (``columns`` by field id, with ``_file`` and ``_pos``): the
    same frame the round's statements run over (``sys.validate`` replays the tiered changelog with it)."""
    return _changes(handle, changes, columns)


def chunk_files(handle: TableHandle, changes: Chunk) -> Any:
    """The data files the chunk's appends added, with their data sequence numbers (``stream_files``'s
    columns): a DataFrame the MERGE joins to the chunk's rows by ``_file``.

    Read as of the chunk's end snapshot (later commits, a compaction during
    the round included, do not matter); when a ``replace`` commit inside the
    range rewrote the appends' files, the files the appends themselves added.
    Listed on the driver from the manifests (``LakeFiles.chunkFiles``, a local
    relation: no Spark job, and Spark knows its size for the broadcast);
    through the ``entries`` metadata table only where that class is missing.
    """
    spark = handle.spark
    listed = file_copy.listed_files(spark, handle.stream_table, changes,
                                    bucket_field(handle.stream_table))
    if listed is not None:
        return listed
    return spark.sql(_files_statement(handle, changes),
                     args={"start_position": changes.start_position, "end_position": changes.end_position})


def _files_statement(handle: TableHandle, changes: Chunk) -> str:
    """``stream_files`` for the chunk (:func:`chunk_files` where tierlake's Java classes are missing):
    ``entries`` as of the end snapshot, or ``all_entries`` when a replace commit inside the range rewrote
    the appends' files."""
    stream = handle.stream
    entries = [stream.database, stream.table, "all_entries" if changes.rewritten else "entries"]
    return sql.render_checked(
        T_STREAM_FILES, entries=entries, bucket_field=bucket_field(handle.stream_table),
        version=None if changes.rewritten else changes.end_snapshot_id,
        snapshot_ids=changes.snapshot_ids if changes.rewritten else None)


class ChangelogWrite:
    """One changelog range of the handle's stream applied to ``target`` (``[db, table]`` or
    ``[db, table, "branch_…"]``) as one commit.

    Entering renders the statement over temporary views of the range; leaving
    drops the views. ``commit`` runs it with the commit properties::

        with ChangelogWrite(handle, target, chunk, columns) as write:
            write.commit({P.COMMIT_USER: COMMIT_USER, ...})
    """

    def __init__(self, handle: TableHandle, target: list[str], changes: Chunk, columns: list[Carried],
                 view_prefix: str = "__tierlake", strategy: WriteStrategy | None = None):
        self.handle, self.target, self.changes = handle, target, changes
        self.spark, self.stream, self.spec = handle.spark, handle.stream, handle.spec
        # LOG_APPEND, PK_MERGE or PK_LOAD (a primary-key range into a target known to hold no rows:
        # its winners appended, see commit()); None: as write_strategy.choose says for the spec.
        self.strategy = strategy if strategy is not None else write_strategy.choose(self.spec)
        if self.strategy not in STATEMENTS:
            raise ValueError(f"ChangelogWrite does not write {self.strategy}")
        # A round fixes its columns once (sync_lake_schema's answer): a column
        # added to the stream mid-round is synced by the next one.
        self.carried = columns
        self.columns = [c.name for c in self.carried]
        suffix = uuid.uuid4().hex[:12]
        self.delta_view, self.files_view = f"{view_prefix}_delta_{suffix}", f"{view_prefix}_files_{suffix}"
        self.statement: str | None = None

    def __enter__(self) -> ChangelogWrite:
        try:
            self._prepare()
        except BaseException:
            self._drop_views()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._drop_views()

    def _prepare(self) -> None:
        spark, changes = self.spark, self.changes
        carried = self.carried + ([lake_schema.change_type_column(self.handle.stream_table)]
                                  if self.spec.is_primary_key else [])
        _changes(self.handle, changes, carried).createOrReplaceTempView(self.delta_view)
        if self.strategy is WriteStrategy.LOG_APPEND:
            self.statement = sql.render_checked(STATEMENTS[self.strategy], target=self.target,
                                                delta=self.delta_view, columns=self.columns)
            return
        chunk_files(self.handle, changes).createOrReplaceTempView(self.files_view)
        # The changelog rule is checked inside the MERGE (validation.GUARD); see commit().
        self.statement = sql.render_checked(
            STATEMENTS[self.strategy], target=self.target, delta=self.delta_view,
            files=self.files_view, columns=self.columns,
            json_columns=validation.json_columns(spark, self.delta_view, self.columns),
            keys=self.spec.primary_key, sequence_by=self.spec.sequence_by, change_type=CHANGE_TYPE,
            change_types=CHANGE_TYPES, guard=validation.GUARD)

    def commit(self, properties: dict[str, str]) -> None:
        statement = self.statement

        def write() -> None:
            if self.strategy is not WriteStrategy.PK_LOAD:
                self.spark.sql(statement)
                return
            # The winners of a bucketed chunk come out of the windows one stream bucket per task,
            # which is one lake bucket (the same key, bucket function and count): Iceberg's default
            # hash distribution would shuffle every row once more only to keep them where they are.
            # Fanout: a task that holds several buckets (the chunk read without its buckets, e.g. the
            # retry below) writes each to its own file instead of failing on unclustered rows.
            (self.spark.sql(statement).writeTo(sql.quote_table(*self.target))
             .option("distribution-mode", "none").option("fanout-enabled", "true").append())

        def run() -> None:
            with_commit_properties(self.spark, properties, write)

        try:
            if self.spec.is_primary_key:
                self._bucketed(run)
            else:
                run()
        except Exception as e:
            if not self.spec.is_primary_key or not raised_by_sql(e, validation.GUARD):
                raise
            # The MERGE refused the chunk and committed nothing; the full check names what and where.
            validation.check_changes(self.spark, self.stream, self.spec, self.delta_view, self.files_view,
                                     self.columns)
            # The two disagree: a tierlake defect, not the user's data. The MERGE's own error goes on
            # (a retryable failure, nothing committed) rather than a ChangelogError no rollback could fix.
            log.error("the MERGE of %s refused a chunk that the changelog check accepts", self.stream)
            raise

    def _bucketed(self, run: Callable[[], None]) -> None:
        """``run`` the MERGE with :data:`BUCKETED_MERGE_CONF`; once more without them if that fails.

        Spark's and Iceberg's storage-partitioned join have had planning and
        execution failures on some layouts (apache/iceberg#15349, #15602): a
        MERGE that fails before its commit committed nothing, so it runs again
        the way Spark plans it by default. Not after the changelog guard (the
        chunk itself is refused) nor after a commit error (the commit may have
        happened). The round's session is its own, so the retry plans without them.
        """
        try:
            with bucketed_merge(self.spark):
                run()
        except Exception as e:
            found = failure(e)  # read once: both questions are asked of it
            if raised_by_sql(found, validation.GUARD) or is_(found, Kind.COMMIT_FAILED):
                raise
            text = str(e)
            log.warning("the bucketed MERGE of %s failed, running it again without the storage-partitioned "
                        "join settings: %s", self.stream, text.splitlines()[0][:500] if text else type(e).__name__)
            run()

    def _drop_views(self) -> None:
        self.spark.catalog.dropTempView(self.delta_view)
        self.spark.catalog.dropTempView(self.files_view)


def replace_with_snapshot(spark: Any, source: TablePath, snapshot_id: int, target: list[str],
                          columns: list[Column], properties: dict[str, str]) -> None:
    """Replace ``target``'s rows with ``source`` at ``snapshot_id`` (a KV snapshot), as one commit.

    ``columns`` are the target's: one the source lacks (added since the
    snapshot) is NULL.
    """
    from pyspark.sql import functions as F

    source_columns = {f.name.lower() for f in spark.table(source.quoted).schema.fields}
    frame = spark.read.option("snapshot-id", str(snapshot_id)).table(source.quoted)
    frame = frame.select([
        F.col(sql.quote_ident(c.name)) if c.name.lower() in source_columns else F.lit(None).cast(c.type).alias(c.name)
        for c in columns
    ])
    writer = frame.writeTo(sql.quote_table(*target))
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.overwrite(F.lit(True))


def append_empty(table: Any, properties: dict[str, str]) -> None:
    """An empty commit to ``table`` (an Iceberg ``Table``) carrying ``properties`` (records a position
    when the range changed no row); the object sees its own commit."""
    append = table.newAppend()
    for key, value in properties.items():
        append.set(key, value)
    append.commit()
