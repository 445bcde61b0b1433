"""Atomic ``CREATE TABLE … AS SELECT`` of tiered tables (FLIP-305; docs/design.md, 'Atomic create-as-select').

:class:`TwoPhaseCreate` is FLIP-305's two-phase catalog table for a tiered
table. ``begin`` journals the statement, then stages the stream and lake
tables in ``sys`` under names no user looks for, at locations unique to the
statement; ``write`` runs the query once into the staged stream table and
tiers that into the staged lake table with the tiering service's own round
(so the lake holds exactly what a round would have made of it, and records
the stream position it covers); ``commit`` renames both into place and
registers the table with the coordinator; ``abort`` drops whatever exists,
deletes both locations and marks the journal.

The journal records the phase a statement reached (``staged``, ``written``
with the stream position the staged lake covers, ``renamed``) before each
step that follows it. Once the stream table is renamed into place users can
see it, so that is the commit point: :func:`recover` at the next start
finishes a statement killed after it (renames the lake table if the crash
came between the two renames, registers the table at the journaled
position, marks the row ``recovered``) and rolls back one killed before it.

:func:`create_table_as` drives the phases from the statement's outcome, as
FLIP-305's job-status hook does: success commits; a failed query, a lost
commit race or a client cancel (the gateway's CancelOperation or a
disconnect, through :mod:`tierlake.server.runtime.operations`) aborts.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from datetime import datetime, timezone
from typing import Any

from tierlake import sql
from tierlake.server.catalog import properties as P
from tierlake.server.catalog.columns import columns_of, struct_fields
from tierlake.server.catalog.properties import validate
from tierlake.server.catalog.spec import CHANGE_TYPE, TieredSpec, refuse_odd_struct_fields
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.catalog.tiered_tables import create_lake_table, create_stream_table, lake_path, stream_properties
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.planner import plan_round
from tierlake.server.coordinator.registration import (
    coordinator,
    find_registered,
    follow_table_change,
    register_table,
)
from tierlake.server.coordinator.state_machine import Status
from tierlake.server.exceptions import (
    InvalidArgumentError,
    NullKeyError,
    OperationCancelledError,
    SparkSqlError,
    SqlSyntaxError,
    TableExistsError,
)
from tierlake.server.ingest import request_ids
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.runtime import faults, jvm_errors, operations
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.jvm_errors import Kind, is_
from tierlake.server.runtime.session import activate
from tierlake.server.state.state_table import SmallTable
from tierlake.server.tiering.round import run_round

log = logging.getLogger("tierlake.ctas")

JOURNAL = "sys.ctas_journal"
STAGING_DATABASE = "sys"
T_RENAME = "templates/rename_table.sql.j2"
T_DROP = "templates/drop_table.sql.j2"
T_DROP_DATABASE = "templates/drop_database.sql.j2"
KEEP_FINISHED = 500
RESULT_COLUMNS = [("table_id", "bigint"), ("table_path", "string"), ("lake_table", "string"),
                  ("status", "string"), ("rows", "bigint")]

RUNNING, COMMITTED, ABORTED, ROLLED_BACK, RECOVERED = "running", "committed", "aborted", "rolled_back", "recovered"
# Phases of a running statement, each journaled before the step that follows it.
STAGED, WRITTEN, RENAMED = "staged", "written", "renamed"

# Commit phases of one process run one at a time: the existence checks and
# renames of two statements for the same name must not interleave.
_COMMIT_LOCK = threading.Lock()


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Journal:
    """``sys.ctas_journal``: one row per statement."""

    def __init__(self, spark: Any):
        self.table = SmallTable(spark, JOURNAL)

    def add(self, row: dict[str, Any]) -> None:
        def change(rows):
            finished = [r for r in rows if r["state"] != RUNNING]
            finished.sort(key=lambda r: r["started_at"] or _now(), reverse=True)
            keep = {id(r) for r in finished[:KEEP_FINISHED]}
            rows[:] = [r for r in rows if r["state"] == RUNNING or id(r) in keep] + [row]
            return None, True

        self.table.update(change)

    def advance(self, ctas_id: str, phase: str, tiered_position: int | None = None) -> None:
        """The statement reached ``phase`` (``tiered_position``: the stream
        position its staged lake table covers, kept once known)."""

        def change(rows):
            for r in rows:
                if r["ctas_id"] == ctas_id:
                    r.update(phase=phase)
                    if tiered_position is not None:
                        r.update(tiered_position=tiered_position)
                    return None, True
            return None, False

        self.table.update(change)

    def finish(self, ctas_id: str, state: str, detail: str | None = None) -> None:
        def change(rows):
            for r in rows:
                if r["ctas_id"] == ctas_id:
                    r.update(state=state, finished_at=_now(), detail=detail)
                    return None, True
            return None, False

        self.table.update(change)

    def unfinished(self) -> list[dict[str, Any]]:
        return [r for r in self.table.load()[1] if r["state"] == RUNNING]


def _location_key(location: str | None) -> str:
    """A local location as an absolute path, however the URI spells it."""
    text = (location or "").rstrip("/")
    for prefix in ("file://", "file:"):
        if text.startswith(prefix):
            return "/" + text[len(prefix):].lstrip("/")
    return text


def _label(name: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", name.lower())[:100]


def _table_location(spark: Any, database: str, table: str, ctas_id: str) -> str:
    if spark.catalog.databaseExists(database):
        base = spark.catalog.getDatabase(database).locationUri
    else:
        base = spark.conf.get("spark.sql.warehouse.dir").rstrip("/") + f"/{_label(database)}.db"
    # The name only labels the directory: a hostile one must not steer the path.
    return f"{base.rstrip('/')}/{_label(table)}-{ctas_id}"


def _owned(spark: Any, name: TablePath, location: str) -> bool:
    """``name`` exists and is the table this statement created (same location)."""
    if not spark.catalog.tableExists(name.quoted):
        return False
    try:
        return _location_key(str(load_table(spark, name).location())) == _location_key(location)
    except Exception:  # noqa: BLE001 - not an Iceberg table: certainly not ours
        return False


def _delete_location(spark: Any, location: str) -> None:
    # DROP TABLE … PURGE deletes the files the metadata names, but leaves the
    # directories and anything an aborted write left unreferenced.
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if fs.exists(path):
        fs.delete(path, True)


def _database_empty(spark: Any, database: str) -> bool:
    # listTables also lists the session's temporary views (the server's KV maintenance makes some in the
    # same session while it writes a snapshot): they are in no database.
    return spark.catalog.databaseExists(database) and not any(
        not t.isTemporary for t in spark.catalog.listTables(database))


def _rename(spark: Any, source: TablePath, target: TablePath) -> bool:
    """Rename ``source`` to ``target``; False when ``target`` exists already."""
    try:
        spark.sql(sql.render(T_RENAME, source=[source.database, source.table],
                             target=[target.database, target.table]))
        return True
    except Exception as e:
        if is_(e, Kind.ALREADY_EXISTS):
            return False
        raise


def _paths(row: dict[str, Any]) -> tuple[TablePath, TablePath, TablePath, TablePath]:
    return (TablePath(row["database_name"], row["table_name"]), TablePath(row["lake_database"], row["lake_table"]),
            TablePath(*row["staged_stream"].split(".", 1)), TablePath(*row["staged_lake"].split(".", 1)))


def remove_everything(spark: Any, row: dict[str, Any]) -> list[str]:
    """Drop the statement's tables (staged or renamed, only if they are its own)
    and delete its locations; returns what was dropped. Idempotent."""
    stream, lake, staged_stream, staged_lake = _paths(row)
    dropped = []
    for name, location in ((stream, row["stream_location"]), (staged_stream, row["stream_location"]),
                           (lake, row["lake_location"]), (staged_lake, row["lake_location"])):
        if _owned(spark, name, location):
            spark.sql(sql.render(T_DROP, table=[name.database, name.table], purge=True))
            dropped.append(str(name))
        elif name in (staged_stream, staged_lake) and spark.catalog.tableExists(name.quoted):
            # A staged name is the statement's alone, even if creating it failed half-way.
            spark.sql(sql.render(T_DROP, table=[name.database, name.table], purge=True))
            dropped.append(str(name))
    for location in (row["stream_location"], row["lake_location"]):
        _delete_location(spark, location)
    created = row.get("created_database")
    if created and _database_empty(spark, created):
        spark.sql(sql.render(T_DROP_DATABASE, database=created))
        dropped.append(f"database {created}")
    return dropped


class TwoPhaseCreate:
    """A tiered table created by CTAS, in two phases (FLIP-305's TwoPhaseCatalogTable)."""

    def __init__(self, ctx: Any, target: TablePath, properties: dict[str, str], if_not_exists: bool = False):
        self.ctx = ctx
        self.spark = ctx.spark
        self.target = target
        self.lake = lake_path(ctx.config, target)
        self.properties = dict(properties)
        self.if_not_exists = if_not_exists
        self.ctas_id = uuid.uuid4().hex[:12]
        self.staged_stream = TablePath(STAGING_DATABASE, f"ctas_{self.ctas_id}_stream")
        self.staged_lake = TablePath(STAGING_DATABASE, f"ctas_{self.ctas_id}_lake")
        self.journal = Journal(self.spark)
        self.row: dict[str, Any] | None = None
        self.registered = False  # commit registered the table (an abort after that unregisters it)
        self.made_view_database: str | None = None  # the fresh view's database, if commit made it
        self.spec: Any = None
        self.columns: list = []
        self.position = 0
        self.rows = 0
        # The key of the statement's tierlake.write.request-id (server/ingest/request_ids.py), or None:
        # its stream commit carries it, so a retry finds this CTAS committed.
        self.request_key = request_ids.current_key()

    def exists(self) -> TablePath | None:
        for name in (self.target, self.lake):
            if self.spark.catalog.tableExists(name.quoted):
                return name
        return None

    def begin(self, columns: list) -> None:
        """Journal the statement, then stage both tables (empty)."""
        self.columns = columns
        self.spec = TieredSpec.from_properties(self.properties, columns)
        if not self.spark.catalog.databaseExists(self.target.database):
            raise SparkSqlError(f"[SCHEMA_NOT_FOUND] The schema `{self.target.database}` cannot be found.", "3F000")
        created_database = None if self.spark.catalog.databaseExists(self.lake.database) else self.lake.database
        self.row = dict(
            ctas_id=self.ctas_id, database_name=self.target.database, table_name=self.target.table,
            lake_database=self.lake.database, lake_table=self.lake.table,
            staged_stream=str(self.staged_stream), staged_lake=str(self.staged_lake),
            stream_location=_table_location(self.spark, self.target.database, self.target.table, self.ctas_id),
            lake_location=_table_location(self.spark, self.lake.database, self.lake.table, self.ctas_id),
            created_database=created_database, state=RUNNING, user_name=self.ctx.user,
            started_at=_now(), finished_at=None, detail=None, phase=STAGED, tiered_position=None,
        )
        self.journal.add(self.row)
        if created_database:
            self.spark.sql(sql.render("templates/create_database.sql.j2", database=created_database))
        create_stream_table(self.spark, self.staged_stream, columns, self.spec,
                            stream_properties(self.properties, self.lake), location=self.row["stream_location"])
        create_lake_table(self.spark, self.target, self.lake, columns, self.spec, at=self.staged_lake,
                          location=self.row["lake_location"])
        log.info("CTAS %s of %s: staged as %s and %s", self.ctas_id, self.target, self.staged_stream, self.staged_lake)

    def write(self, frame: Any, cancelled: Any = lambda: False) -> None:
        """The query's rows into the staged stream table, then a tiering round
        of them into the staged lake table."""
        from pyspark.sql import functions as F

        if self.spec.is_primary_key:
            frame = frame.withColumn(CHANGE_TYPE, F.lit(None).cast("string"))
        writer = frame.writeTo(self.staged_stream.quoted)
        if self.request_key is not None:
            writer = writer.option(f"snapshot-property.{P.WRITE_REQUEST_ID}", self.request_key)
        try:
            writer.append()
        except Exception as e:
            # The stream table's key columns are NOT NULL: Spark's write check stops the job with a
            # NullPointerException deep in a task, which reached the client as XX000 with a Java stack.
            if self.spec.is_primary_key and is_(e, Kind.NULL_IN_NON_NULLABLE):
                raise NullKeyError(
                    f"CREATE TABLE {self.target} AS SELECT refused: the query yields a NULL in the key column(s) "
                    f"{', '.join(self.spec.primary_key)}; key columns must not be NULL (filter the rows or "
                    "coalesce the keys). Nothing was created") from None
            raise
        faults.point("ctas-after-write")
        head = load_table(self.spark, self.staged_stream).currentSnapshot()
        self.rows = 0 if head is None else int(dict(head.summary()).get("added-records", 0))

        def check() -> None:
            if cancelled():
                raise OperationCancelledError("the statement was cancelled")

        # All or nothing: the staged rows in one commit, however long it takes.
        handle = TableHandle.staged(self.spark, self.ctx.config, self.staged_stream, self.staged_lake, self.spec,
                                    f"ctas-{self.ctas_id}")
        result = run_round(plan_round(handle), check_epoch=check)
        self.position = result.end_position
        # Before anything is renamed: recovery registers at this position.
        self.journal.advance(self.ctas_id, WRITTEN, tiered_position=self.position)

    def commit(self) -> Any:
        """Rename both tables into place and register; returns the coordinator state.

        Losing the race for the name to a concurrent creator aborts, like
        Spark's own atomic CTAS (or is a no-op with IF NOT EXISTS).
        """
        with _COMMIT_LOCK:
            taken = self.exists()
            if taken is not None:
                raise TableExistsError(f"table {taken} already exists")
            renamed = _rename(self.spark, self.staged_stream, self.target)
            faults.point("ctas-during-commit")
            renamed = renamed and _rename(self.spark, self.staged_lake, self.lake)
            if not renamed:
                raise TableExistsError(f"table {self.exists() or self.target} was created concurrently")
            self.journal.advance(self.ctas_id, RENAMED)
            faults.point("ctas-after-rename")
            state, _ = register_table(self.ctx, self.target, self.lake, Status.NEW, tiered_position=self.position)
            self.registered = True
            view_database = fresh_view.fresh_path(self.ctx.config, self.target).database
            self.made_view_database = None if self.spark.catalog.databaseExists(view_database) else view_database
            fresh_view.create(self.spark, self.ctx.config, self.target, self.lake)
        try:
            self.journal.finish(self.ctas_id, COMMITTED)
        except Exception:
            log.warning("CTAS %s committed, but its journal row could not be updated", self.ctas_id, exc_info=True)
        log.info("CTAS %s committed: %s (%d rows, position %d), lake table %s, table id %d", self.ctas_id,
                 self.target, self.rows, self.position, self.lake, state.table_id)
        return state

    def abort(self, reason: str) -> None:
        if self.row is None:
            return
        try:
            if self.registered:  # the commit failed after registering (its fresh view, say): all of it goes
                fresh_view.drop_view(self.spark, fresh_view.fresh_path(self.ctx.config, self.target))
                follow_table_change(self.ctx, self.target, None)
                self.registered = False
                if self.made_view_database and _database_empty(self.spark, self.made_view_database):
                    self.spark.sql(sql.render(T_DROP_DATABASE, database=self.made_view_database))
            dropped = remove_everything(self.spark, self.row)
            self.journal.finish(self.ctas_id, ABORTED, reason[:2048])
            log.info("CTAS %s of %s aborted (%s); removed %s", self.ctas_id, self.target, reason, dropped or "nothing")
        except Exception:
            log.exception("CTAS %s of %s: abort failed; it is rolled back at the next start", self.ctas_id,
                          self.target)


def check_query(spark: Any, query: str) -> str:
    """``query`` must be one query (SELECT, WITH …, VALUES, set operations) as
    Spark's own parser reads it: ``spark.sql`` runs commands eagerly, so
    anything else must never reach it. Two parses of the text decide: the
    statement ``spark.sql`` will run, and Spark's query rule alone; they must
    agree (a command is no query; a query followed by more is not one
    statement)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentError("query must be a SELECT statement")
    text = query.strip().rstrip(";").rstrip()
    # Spark's own parser, not the session's: Iceberg's extension parser answers parseQuery with
    # parsePlan, so through it a DROP TABLE passed for a query (and spark.sql ran it). Parsed with
    # the session active, for its settings (variable substitution is off in the server's).
    activate(spark)
    parser = jclass("org.apache.spark.sql.execution.SparkSqlParser", spark.sparkContext._jvm)()
    single = "query must be a single SELECT statement (SELECT, WITH … SELECT, UNION, …)"
    try:
        statement = parser.parsePlan(text)
    except Exception as e:  # noqa: BLE001 - Spark's ParseException, read below
        try:
            parser.parseQuery(text)
        except Exception:  # noqa: BLE001 - not even its start is a query: Spark's message says why
            raise SqlSyntaxError(f"cannot parse the query: {jvm_errors.message(e).strip().splitlines()[0]}") \
                from None
        raise InvalidArgumentError(single) from None  # a query followed by more
    try:
        as_query = parser.parseQuery(text)
    except Exception:  # noqa: BLE001 - a statement that is no query
        raise InvalidArgumentError(single) from None
    # Expression ids differ between two parses (every alias gets a new one); the trees must not.
    if (str(statement.getClass().getName()) != str(as_query.getClass().getName())
            or _without_ids(str(statement.treeString())) != _without_ids(str(as_query.treeString()))):
        raise InvalidArgumentError(single)
    return text


def _without_ids(tree: str) -> str:
    return re.sub(r"#\d+L?", "#", tree)


def create_table_as(ctx: Any, target: TablePath, query: str, properties: dict[str, str],
                    if_not_exists: bool = False) -> list[tuple]:
    """Run one atomic CTAS of a tiered table; returns the result row(s)."""
    validate(properties)  # before the query runs or anything is staged; columns are checked in begin
    spark = ctx.spark
    create = TwoPhaseCreate(ctx, target, properties, if_not_exists)
    taken = create.exists()
    if taken is not None:
        if _committed_before(ctx, create):  # a retry of this statement, which committed: nothing written
            return _answered_again(ctx, create)
        if if_not_exists:
            return []
        raise TableExistsError(f"table {taken} already exists")
    frame = spark.sql(check_query(spark, query))  # analysis errors surface here, before anything is staged
    columns = columns_of(frame.schema)
    if not columns:
        raise InvalidArgumentError("the query of a CREATE TABLE … AS SELECT must return columns")
    for f in frame.schema.fields:  # names the metastore cannot hold, before anything is staged
        refuse_odd_struct_fields(f.name, struct_fields(f.dataType))
    control = operations.current()
    sc = spark.sparkContext
    group = f"tierlake-ctas-{create.ctas_id}"
    sc.setJobGroup(group, f"CREATE TABLE {target} AS SELECT", interruptOnCancel=True)
    try:
        hook = StatementHook(create, control, on_cancel=lambda: sc.cancelJobGroup(group))
        try:
            state = hook.run(columns, frame)
        except TableExistsError:
            if _committed_before(ctx, create):  # the same request's first attempt won the race
                return _answered_again(ctx, create)
            raise
    finally:
        sc._jsc.clearJobGroup()
    if state is None:  # IF NOT EXISTS, and a concurrent creator won
        return []
    return [(state.table_id, str(target), str(create.lake), state.status.value, create.rows)]


def _committed_before(ctx: Any, create: TwoPhaseCreate) -> bool:
    """Whether the statement's request id is committed to the existing target (checked under the
    stream table's commit lock, with the ids its committer remembers): the statement is a retry."""
    if create.request_key is None:
        return False
    try:
        stream_table = load_table(ctx.spark, create.target)
    except Exception:  # noqa: BLE001 - not an Iceberg table: not this statement's
        return False
    return bool(jclass(STREAM_INGEST, ctx.spark.sparkContext._jvm).committedKey(stream_table, create.request_key))


def _answered_again(ctx: Any, create: TwoPhaseCreate) -> list[tuple]:
    state = find_registered(coordinator(ctx).load()[1], create.target)
    log.info("CTAS of %s: its request id is committed already; answered again, nothing written", create.target)
    if state is None:
        return []
    return [(state.table_id, str(create.target), str(create.lake), state.status.value, 0)]


class StatementHook:
    """FLIP-305's job-status hook: the statement's outcome ends the two-phase create.

    ``run`` begins, writes and, when the statement succeeded, commits; a
    failure (``on_failed``) or a cancel by the client (``on_cancelled``)
    aborts instead. Returns the coordinator state, or None when IF NOT EXISTS
    met a concurrent creator.
    """

    def __init__(self, create: Any, control: Any = None, on_cancel: Any = None):
        self.create = create
        self.control = control
        self.on_cancel = on_cancel

    @property
    def cancelled(self) -> bool:
        return self.control is not None and self.control.cancelled

    def run(self, columns: list, frame: Any) -> Any:
        unregister = (self.control.on_cancel(self.on_cancel) if self.control is not None and self.on_cancel
                      else (lambda: None))
        try:
            self.create.begin(columns)
            faults.point("ctas-after-begin")
            self.create.write(frame, lambda: self.cancelled)
            if self.cancelled:
                raise OperationCancelledError("the statement was cancelled")
            return self.on_finished()
        except BaseException as e:
            if self.cancelled:
                self.on_cancelled()
                raise OperationCancelledError(
                    f"CREATE TABLE {self.create.target} AS SELECT was cancelled; nothing was created") from None
            if isinstance(e, TableExistsError) and self.create.if_not_exists:
                self.create.abort("IF NOT EXISTS: the table was created concurrently")
                return None
            self.on_failed(e)
            raise
        finally:
            unregister()

    def on_finished(self) -> Any:
        return self.create.commit()

    def on_failed(self, error: BaseException) -> None:
        self.create.abort(f"{type(error).__name__}: {error}")

    def on_cancelled(self) -> None:
        self.create.abort("cancelled by the client")


def recover(ctx: Any) -> list[dict[str, Any]]:
    """At server start: end every statement the journal says is unfinished.

    - registered already (killed after the registration, before the journal
      row was completed): kept, ``recovered``;
    - phase ``renamed``, or ``written`` with the stream table already in
      place (killed between the two renames): users could see the stream
      table, so the statement is finished, not rolled back: the lake table is
      renamed into place if it is still staged, the table is registered at
      the journaled position, ``recovered``;
    - anything earlier (``staged``, ``written`` with nothing renamed), or a
      commit that cannot be finished (the lake name was taken meanwhile):
      rolled back, ``rolled_back``.
    """

    spark = ctx.spark
    journal = Journal(spark)
    outcomes = []
    for row in journal.unfinished():
        stream, lake, _, _ = _paths(row)
        _, states = coordinator(ctx).load()
        registered = find_registered(states, stream)
        if (registered is not None and _owned(spark, stream, row["stream_location"])
                and _owned(spark, lake, row["lake_location"])):
            journal.finish(row["ctas_id"], RECOVERED, "the server stopped after the commit point; kept")
            log.warning("CTAS %s of %s was interrupted after its commit point; it is complete", row["ctas_id"], stream)
            outcomes.append(dict(row, state=RECOVERED))
            continue
        if registered is None and _finish_commit(ctx, row):
            detail = (f"the server stopped after the tables were renamed into place (phase {row.get('phase')}); "
                      f"registered at start at position {row['tiered_position']}")
            journal.finish(row["ctas_id"], RECOVERED, detail)
            log.warning("CTAS %s of %s was interrupted after its commit point (phase %s); finished: registered "
                        "at position %s", row["ctas_id"], stream, row.get("phase"), row["tiered_position"])
            outcomes.append(dict(row, state=RECOVERED))
            continue
        dropped = remove_everything(spark, row)
        detail = "the server stopped before the statement committed; rolled back at start"
        journal.finish(row["ctas_id"], ROLLED_BACK, detail)
        log.warning("CTAS %s of %s (started %s by %s) was unfinished; rolled back, removed %s", row["ctas_id"], stream,
                    row["started_at"], row["user_name"], dropped or "nothing")
        outcomes.append(dict(row, state=ROLLED_BACK))
    return outcomes


def _finish_commit(ctx: Any, row: dict[str, Any]) -> bool:
    """Finish a commit that passed its commit point (the stream table renamed
    into place): rename the lake table if it is still staged, then register.
    False when the statement had not reached it, or cannot be finished."""
    spark = ctx.spark
    stream, lake, _, staged_lake = _paths(row)
    if (row.get("phase") not in (WRITTEN, RENAMED) or row.get("tiered_position") is None
            or not _owned(spark, stream, row["stream_location"])):
        return False
    if not _owned(spark, lake, row["lake_location"]):
        # Killed between the two renames: the lake table is still staged.
        if not _owned(spark, staged_lake, row["lake_location"]) or not _rename(spark, staged_lake, lake):
            log.warning("CTAS %s of %s: the lake table %s cannot be put in place; rolling back", row["ctas_id"],
                        stream, lake)
            return False
    register_table(ctx, stream, lake, Status.NEW, tiered_position=int(row["tiered_position"]))
    fresh_view.create(spark, ctx.config, stream, lake)
    return True
