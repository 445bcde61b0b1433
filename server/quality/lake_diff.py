"""``sys.validate``'s comparison of a lake table with its stream: does the lake
hold exactly what the stream implies up to the lake's tiered position?

A lake table is written by tiering only, but an admin may still write into it
(docs/security.md, "Writers and tiered tables"), and nothing in a round would
notice: a round plans from the newest tiering commit in ``main``'s history
and merges on top of whatever ``main`` holds. This check notices.

What it compares (``sql/templates/lake_diff.sql.j2``, one query):

- the lake as of one snapshot (``main`` when the run started), and the
  position its tiering commits recorded (not the coordinator's: the lake's
  rows are what that position says);
- log tables: the stream's rows as of the stream snapshot at that position,
  as a multiset (a duplicated or a forged row counts);
- primary-key tables: the rows a load of the changelog up to the position
  into an empty table gives, by the round's own statement
  (``tiering_pk_load.sql.j2``: last change per key by commit, then
  ``sequence-by``; a delete removes the key). The changelog is the
  stream's from its first commit, or, where snapshot expiry or log retention
  removed the start, the newest retained KV snapshot at or before the
  position followed by the stream's commits after it — what a round
  rebuilding the lake would read (server/tiering/snapshot_split.py);
- the columns both hold, by the stream's field ids (a rename is followed;
  a lake column that carries no stream column now, and a stream column the
  lake does not have yet, are not compared and are named in the result).

Cost: one Spark query, reading the lake snapshot once and the stream
prefix once (a log table's rows up to the position; a primary-key table's
changes since the KV snapshot, or all of them), with one shuffle of both
sides by row (a primary-key changelog is also shuffled once by key, as in a
round). Aggregation spills, and one row comes back: its cost grows with the
table, never its memory. Nothing is cached or written.

When the stream no longer holds what the lake was tiered from (a log table's
rows removed by log retention, a primary-key table's early history expired
with no retained KV snapshot reaching it, the snapshot at the position gone)
the result says ``unverifiable`` and why, and compares nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tierlake import sql
from tierlake.server.catalog import field_ids, reads
from tierlake.server.catalog.properties import LOG_START_PROPERTY, MAINTENANCE, SOURCE_POSITION
from tierlake.server.catalog.spec import CHANGE_TYPE, CHANGE_TYPES
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.changelog import lake_schema, lake_write, validation
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.lake_schema import Carried
from tierlake.server.changelog.planner import Chunk, range_chunk, summary
from tierlake.server.changelog.positions import snapshot_at
from tierlake.server.quality import gx
from tierlake.server.runtime.jvm import string_map

log = logging.getLogger("tierlake.quality")

T_LAKE_DIFF = "templates/lake_diff.sql.j2"
CHECK = "tierlake_lake_equals_stream"
EQUAL, DIFFERS, UNVERIFIABLE = "equal", "differs", "unverifiable"
VIEW_PREFIX = "__tierlake_validate"
# The ``_file`` of a KV snapshot's rows in the replayed changelog, and the one "file" at its position.
KV_FILE = "tierlake:kv-snapshot"
OTHER_COMMITS_SHOWN = 5  # the oldest lake commits tiering did not make, named when the lake differs
MAX_WALK = 10_000  # snapshots of main's history looked at for them
# Summary keys of a snapshot that changed rows; one with none of them (the empty root snapshot Iceberg gives a
# branch made on a table without snapshots, where a first round starts) changed nothing.
_CHANGED_FILES = ("added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files")


@dataclass(frozen=True)
class KvBase:
    """A retained KV snapshot a primary-key changelog may start from (``sys.kv_snapshot_catalog``)."""

    kv_table: str
    snapshot_id: int
    log_position: int
    stream_snapshot_id: int


@dataclass
class Diff:
    status: str  # EQUAL, DIFFERS or UNVERIFIABLE
    position: int
    compared_with: str = ""
    missing_rows: int = 0
    extra_rows: int = 0
    missing_sample: list[Any] = field(default_factory=list)
    extra_sample: list[Any] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)
    reason: str | None = None
    other_commits: list[dict[str, Any]] = field(default_factory=list)  # oldest first, at most OTHER_COMMITS_SHOWN
    other_commit_count: int = 0

    def outcome(self) -> gx.Outcome:
        """As one row of ``sys.validate`` / ``sys.quality_results``; ``success`` NULL when unverifiable."""
        observed: dict[str, Any] = {"status": self.status}
        if self.status == UNVERIFIABLE:
            observed["reason"] = self.reason
        else:
            observed.update(missing_rows=self.missing_rows, extra_rows=self.extra_rows,
                            compared_with=self.compared_with)
        if self.not_compared:
            observed["not_compared"] = self.not_compared
        if self.other_commit_count:
            observed.update(other_commits=self.other_commits, other_commit_count=self.other_commit_count)
        sample = None
        if self.status == DIFFERS:
            sample = json.dumps({"missing": self.missing_sample, "extra": self.extra_sample}, sort_keys=True)
        return gx.Outcome(gx.describe(CHECK, {"position": self.position}),
                          None if self.status == UNVERIFIABLE else self.status == EQUAL,
                          json.dumps(observed, sort_keys=True),
                          None if self.status == UNVERIFIABLE else self.missing_rows + self.extra_rows, sample)


class _Unverifiable(Exception):
    pass


@dataclass
class _Source:
    """What the expected rows are replayed from: a chunk of stream commits, a KV snapshot, or neither."""

    describe: str
    chunk: Chunk | None = None
    kv: KvBase | None = None


def _reaches(stream_table: Any, head: Any, position: int, snapshot_id: int | None) -> bool:
    """Whether ``head``'s history back to ``position`` is retained, ending at ``snapshot_id`` (None: at the
    table's first commit, with nothing expired on the way)."""
    snapshot = head
    while snapshot is not None and int(snapshot.sequenceNumber()) > position:
        parent = snapshot.parentId()
        if parent is None:
            return snapshot_id is None and position == 0
        snapshot = stream_table.snapshot(parent)
    return snapshot is not None and snapshot_id is not None and int(snapshot.snapshotId()) == snapshot_id


def _source(handle: TableHandle, position: int, kv_bases: Iterable[KvBase]) -> _Source:
    spark, stream, spec, stream_table = handle.spark, handle.stream, handle.spec, handle.stream_table
    if position <= 0:
        return _Source("nothing tiered yet (the lake must be empty)")
    log_start = int(string_map(stream_table.properties()).get(LOG_START_PROPERTY) or 0)
    head = snapshot_at(stream_table, position)
    if head is None:
        raise _Unverifiable(f"the stream table {stream} no longer has its snapshot at the lake's position "
                            f"{position} (expired, or its history was rewritten)")
    if not spec.is_primary_key:
        if log_start > 0:
            raise _Unverifiable(f"log retention (table.log.ttl) removed the stream's rows up to position "
                                f"{log_start}; the lake keeps them, the stream cannot show them")
        return _Source(f"the stream's rows as of snapshot {head.snapshotId()}",
                       Chunk(None, int(head.snapshotId()), 0, position, []))
    for base in sorted(kv_bases, key=lambda b: b.log_position, reverse=True):
        if not log_start <= base.log_position <= position:
            continue
        kv = TablePath(*base.kv_table.split(".", 1))
        if not spark.catalog.tableExists(kv.quoted):
            continue
        if load_table(spark, kv).snapshot(base.snapshot_id) is None:
            continue
        if not _reaches(stream_table, head, base.log_position, base.stream_snapshot_id):
            continue
        chunk = range_chunk(stream_table, base.stream_snapshot_id, base.log_position, head)
        return _Source(f"KV snapshot {base.snapshot_id} of {base.kv_table} (log position {base.log_position}) "
                       f"and the stream's changes after it", chunk, base)
    if log_start == 0 and _reaches(stream_table, head, 0, None):
        return _Source("the stream's changes from its first commit", range_chunk(stream_table, None, 0, head))
    raise _Unverifiable(f"the stream's history before position {position} was expired or removed by log "
                        f"retention, and no retained KV snapshot reaches it (CALL sys.kv_snapshot('{stream}') "
                        "takes one)")


def _kv_rows(spark: Any, stream_table: Any, base: KvBase, columns: list[Carried]) -> Any:
    """The KV snapshot's rows as changes of the replay: the compared columns (by field id), upserts,
    all in the one "file" at the snapshot's position."""
    from pyspark.sql import functions as F

    kv = TablePath(*base.kv_table.split(".", 1))
    kv_table = load_table(spark, kv)
    names = {c.field_id: c.name for c in lake_schema.carried_columns(spark, stream_table, kv_table)
             if c.field_id is not None}
    wanted = {c.name: (names.get(c.field_id) if c.field_id is not None else None, c.type) for c in columns}
    frame = _as_of(spark, kv, kv_table, base.snapshot_id, wanted)
    return frame.select("*", F.lit(None).cast("string").alias(CHANGE_TYPE), F.lit(KV_FILE).alias("_file"),
                        F.lit(0).cast("long").alias("_pos"))


def _as_of(spark: Any, path: TablePath, table: Any, snapshot_id: int | None,
           wanted: dict[str, tuple[str | None, str]]) -> Any:
    """``path`` as of ``snapshot_id`` (None: no snapshot, no rows) as ``{out name: (column now, type)}``.

    Iceberg reads a snapshot with that snapshot's schema: a column renamed since (a stream rename
    carried to the lake or KV table) is found there by its field id; one added since is NULL."""
    from pyspark.sql import functions as F

    frame = reads.at_snapshot(spark, path, snapshot_id)
    now = {name.lower(): fid for fid, name in field_ids.schema_fields(table.schema()).items()}
    then = lake_schema.read_fields(table, snapshot_id)
    out = []
    for name, (column, kind) in wanted.items():
        found = None if column is None else then.get(now.get(column.lower(), -1))
        out.append((F.col(sql.quote_ident(found)).cast(kind) if found is not None
                    else F.lit(None).cast(kind)).alias(name))
    frame = frame.select(*out)
    return frame.limit(0) if snapshot_id is None else frame


def other_commits(lake_table: Any, snapshot_id: int | None) -> tuple[list[dict[str, Any]], int]:
    """The commits in ``main``'s history up to ``snapshot_id`` that changed files and that neither a round
    (its summary records ``tiering.source-position``) nor managed maintenance (``tierlake.maintenance``) made:
    the oldest :data:`OTHER_COMMITS_SHOWN` (``snapshot_id``, ``parent_id``, ``operation``) and how many.
    Metadata only; rolling ``main`` back to the oldest one's parent undoes them (docs/security.md)."""
    found: list[dict[str, Any]] = []
    snapshot = None if snapshot_id is None else lake_table.snapshot(snapshot_id)
    walked = 0
    while snapshot is not None and walked < MAX_WALK:
        props = summary(snapshot)
        parent = snapshot.parentId()
        changed = any(int(props.get(k) or 0) for k in _CHANGED_FILES)
        if changed and SOURCE_POSITION not in props and MAINTENANCE not in props:
            found.append({"snapshot_id": int(snapshot.snapshotId()),
                          "parent_id": None if parent is None else int(parent),
                          "operation": str(snapshot.operation())})
        snapshot = None if parent is None else lake_table.snapshot(parent)
        walked += 1
    found.reverse()
    return found[:OTHER_COMMITS_SHOWN], len(found)


def _samples(first: str | None, last: str | None) -> list[Any]:
    out: list[Any] = []
    for text in (first, last):
        if text is not None:
            value = json.loads(text)
            if value not in out:
                out.append(value)
    return out


def compare(handle: TableHandle, lake_snapshot_id: int | None, position: int,
            kv_bases: Iterable[KvBase] = ()) -> Diff:
    """The handle's lake as of ``lake_snapshot_id`` (None: no snapshot, no rows) against its stream up to
    ``position``, read from the handle's tables as they are (the caller refreshed the lake: suite.run)."""
    from pyspark.sql import functions as F

    spark, stream, lake, spec = handle.spark, handle.stream, handle.lake, handle.spec
    stream_table, lake_table = handle.stream_table, handle.lake_table
    carried = lake_schema.carried_columns(spark, stream_table, lake_table)
    columns = [c for c in carried if c.field_id is not None]
    not_compared = [c.name for c in carried if c.field_id is None]
    diff = Diff(UNVERIFIABLE, position, not_compared=not_compared)
    try:
        source = _source(handle, position, kv_bases)
    except _Unverifiable as e:
        diff.reason = str(e)
        return diff
    diff.compared_with = source.describe
    names = [c.name for c in columns]
    suffix = uuid.uuid4().hex[:12]
    views = {k: f"{VIEW_PREFIX}_{k}_{suffix}" for k in ("delta", "files", "lake")}
    change_type = [lake_schema.change_type_column(stream_table)] if spec.is_primary_key else []
    try:
        lake_frame = _as_of(spark, lake, lake_table, lake_snapshot_id, {c.name: (c.name, c.type) for c in columns})
        lake_frame.createOrReplaceTempView(views["lake"])
        parts, files = [], []
        if source.kv is not None:
            parts.append(_kv_rows(spark, stream_table, source.kv, columns))
            files.append(spark.range(1).select(F.lit(KV_FILE).alias("file_path"),
                                               F.lit(source.kv.log_position).cast("long").alias("sequence_number")))
        if source.chunk is not None and (source.chunk.commits or not spec.is_primary_key):
            parts.append(lake_write.read_changes(handle, source.chunk, columns + change_type))
            if spec.is_primary_key:
                files.append(lake_write.chunk_files(handle, source.chunk).select(
                    F.col("file_path"), F.col("sequence_number").cast("long").alias("sequence_number")))
        if parts:
            delta = parts[0]
            for part in parts[1:]:
                delta = delta.unionByName(part)
        else:  # nothing tiered: no expected row
            delta = lake_frame.limit(0).select(
                *[F.col(sql.quote_ident(n)) for n in names],
                *[F.lit(None).cast("string").alias(CHANGE_TYPE)] * bool(change_type),
                F.lit(None).cast("string").alias("_file"), F.lit(None).cast("long").alias("_pos"))
            files = [spark.range(0).select(F.lit(KV_FILE).alias("file_path"),
                                           F.lit(0).cast("long").alias("sequence_number"))]
        delta.createOrReplaceTempView(views["delta"])
        context: dict[str, Any] = dict(delta=views["delta"], lake=views["lake"], columns=names,
                                       json_columns=validation.json_columns(spark, views["delta"], names), keys=[])
        if spec.is_primary_key:
            all_files = files[0]
            for part in files[1:]:
                all_files = all_files.unionByName(part)
            all_files.createOrReplaceTempView(views["files"])
            context.update(files=views["files"], keys=spec.primary_key, sequence_by=spec.sequence_by,
                           change_type=CHANGE_TYPE, change_types=CHANGE_TYPES, guard=validation.GUARD)
        row = spark.sql(sql.render_checked(T_LAKE_DIFF, **context)).collect()[0].asDict()
    finally:
        for view in views.values():
            spark.catalog.dropTempView(view)
    diff.missing_rows, diff.extra_rows = int(row["missing_rows"]), int(row["extra_rows"])
    diff.missing_sample = _samples(row["missing_first"], row["missing_last"])
    diff.extra_sample = _samples(row["extra_first"], row["extra_last"])
    diff.status = EQUAL if diff.missing_rows == diff.extra_rows == 0 else DIFFERS
    if diff.status == DIFFERS:
        diff.other_commits, diff.other_commit_count = other_commits(lake_table, lake_snapshot_id)
    log.info("compared %s with %s up to position %d (%s): %s, %d missing, %d extra", lake, stream, position,
             source.describe, diff.status, diff.missing_rows, diff.extra_rows)
    return diff
