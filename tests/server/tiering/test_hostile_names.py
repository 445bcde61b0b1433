"""Issue 50, reproduction 5: generated names never collide with a user's, and tiered DDL is atomic.

- a tiered table (log and primary-key) whose columns are named like every alias, CTE, subquery and
  helper column the templates used to generate (``d``, ``l``, ``p``, ``w``, ``f``, ``ranked``,
  ``winners``, ``sequence_number``, ``file_path``, …), reserved words, a backtick, a space, a dot,
  Unicode and mixed case is created through the gateway, ingests, tiers exactly (the lake holds what
  the changes say) and reads through its fresh view in every form: pending changes merged in the
  driver and by Spark, and the full scan of the stream;
- the names no column can take (docs/tiering.md, "Reserved names") are refused before anything is
  made: the ``__tierlake`` prefix, Iceberg's metadata columns (``_file``, ``_pos``, …: Iceberg cannot
  read such a table), ``_change_type`` in a log table;
- a tiered CREATE that fails at any step leaves nothing behind (stream table, lake table, the
  databases it made, registration, fresh view), names the step, and runs again.
"""

from __future__ import annotations

import itertools

import pytest
from pyhive import exc

from tests.security.test_lake_validate import comparison
from tests.server.tiering.conftest import run
from tests.server.tiering.test_fresh_views import force_round, local_merge_rows
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.tiering import ddl

pytestmark = pytest.mark.integration

_counter = itertools.count()

# (column as written in the CREATE, type, its value in row i). Every name a template aliased a relation,
# a CTE, a subquery or a window with, or named a helper or metadata-table column; and names that need
# quoting. `d` is the reproduction: `d._file` resolved to this column (INVALID_EXTRACT_BASE_FIELD_TYPE).
COLUMNS = [
    ("`d`", "BIGINT", lambda i: i),
    ("`l`", "STRING", lambda i: f"l{i}"),
    ("`p`", "INT", lambda i: i % 3),
    ("`w`", "DOUBLE", lambda i: i * 1.5),
    ("`f`", "STRUCT<file_path: STRING, sequence_number: BIGINT>", lambda i: ("fp", i)),
    ("`ranked`", "INT", lambda i: i),
    ("`winners`", "STRING", lambda i: "w"),
    ("`sequence_number`", "BIGINT", lambda i: i),
    ("`file_path`", "STRING", lambda i: "x"),
    ("`t`", "INT", lambda i: -i),
    ("`s`", "STRING", lambda i: "s"),
    ("`status`", "INT", lambda i: 2),
    ("`data_file`", "STRING", lambda i: "df"),
    ("`changes`", "INT", lambda i: i),
    ("`checked`", "BOOLEAN", lambda i: i % 2 == 0),
    ("`select`", "INT", lambda i: i),
    ("`from`", "STRING", lambda i: "from"),
    ("`a``b`", "INT", lambda i: i),
    ("`sp ace`", "STRING", lambda i: "sp ace"),
    ("`do.t`", "INT", lambda i: i),
    ("`ünï`", "STRING", lambda i: "ünï"),
    ("`MixedCase`", "INT", lambda i: i),
]
# Primary-key tables: key (d, ranked), ordered within a commit by `sequence_number`.
PK_PROPS = "'primary-key'='d, ranked', 'bucket.num'='2', 'sequence-by'='sequence_number'"


def literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return f"named_struct('file_path', {literal(value[0])}, 'sequence_number', {literal(value[1])})"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(value)


def row(i: int, key: int, change: str | None = None, pk: bool = False) -> tuple:
    values = [c[2](i) for c in COLUMNS]
    values[0] = key  # d
    values[5] = key % 2  # ranked: the second key column
    return tuple(values) + ((change,) if pk else ())


def create_sql(table: str, pk: bool, columns: list[tuple] = COLUMNS) -> str:
    props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h'"
    if pk:
        props += ", " + PK_PROPS
    cols = ", ".join(f"{name} {type_}" for name, type_, _ in columns)
    return f"CREATE TABLE {table} ({cols}) TBLPROPERTIES ({props})"


def insert(cursor, table: str, rows: list[tuple]) -> None:
    values = ", ".join("(" + ", ".join(literal(v) for v in r) + ")" for r in rows)
    run(cursor, f"INSERT INTO {table} VALUES {values}")


def as_tuples(rows) -> list[tuple]:
    return sorted((tuple(tuple(v) if hasattr(v, "__fields__") else v for v in r) for r in rows), key=repr)


def expected(commits: list[list[tuple]], pk: bool) -> list[tuple]:
    """What the lake holds after ``commits``: every row (log), or per key the last change by commit then
    sequence-by, -U skipped, -D deleting (primary-key)."""
    if not pk:
        return as_tuples(r for commit in commits for r in commit)
    winners: dict = {}
    for commit in commits:
        for r in sorted(commit, key=lambda r: r[7]):  # sequence_number
            if r[-1] == "-U":
                continue
            winners[(r[0], r[5])] = r
    return as_tuples(r[:-1] for r in winners.values() if r[-1] != "-D")


def read(spark, relation: str) -> list[tuple]:
    return as_tuples(spark.sql(f"SELECT * FROM {relation}").collect())


def full_scan_view(spark, stream: TablePath, lake: TablePath, view: TablePath) -> None:
    """The view's other form (no incremental read: every live stream file scanned), made under another name."""
    handle = TableHandle(spark, stream, lake)
    spark.sql(fresh_view.render(handle, view, incremental=False))


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_columns_named_like_every_generated_alias_create_ingest_tier_and_read(hive_cursor, spark, db, pk):
    name = f"hostile{next(_counter)}"
    table, lake, view = f"{db}.{name}", f"{db}_lake.{name}", f"{db}_fresh.{name}"
    run(hive_cursor, create_sql(table, pk))
    assert [f.name for f in spark.table(table).schema.fields][:len(COLUMNS)] == [
        c[0].strip("`").replace("``", "`").lower() for c in COLUMNS]

    if pk:
        commits = [[row(1, 1, "+I", pk), row(2, 2, "+I", pk), row(3, 3, "+I", pk)],
                   [row(4, 1, "-U", pk), row(5, 1, "+U", pk), row(6, 2, "-D", pk), row(7, 4, None, pk)],
                   [row(8, 3, "+U", pk), row(9, 3, "+U", pk), row(10, 4, "-D", pk), row(11, 5, "+I", pk)]]
    else:
        commits = [[row(i, i) for i in range(1, 4)], [row(i, i) for i in range(4, 6)], [row(i, i) for i in (6, 7)]]
    insert(hive_cursor, table, commits[0])
    insert(hive_cursor, table, commits[1])
    force_round(spark, table)
    insert(hive_cursor, table, commits[2])  # pending: read by the view from the stream

    assert read(spark, lake) == expected(commits[:2], pk)
    want = expected(commits, pk)
    assert read(spark, view) == want  # the pending changes merged in the driver (FreshMerge)
    with local_merge_rows(spark, 0):
        assert read(spark, view) == want  # ... and by Spark (the distributed form)
    full = f"{db}_fresh.{name}_full_scan"
    full_scan_view(spark, TablePath(db, name), TablePath(f"{db}_lake", name),
                   TablePath(f"{db}_fresh", name + "_full_scan"))
    assert read(spark, full) == want
    # Through the gateway too, and exactly after the last round.
    assert as_tuples(run(hive_cursor, f"SELECT d, `sp ace`, `a``b`, `do.t`, `ünï`, mixedcase FROM {view}")) == \
        as_tuples((r[0], r[18], r[17], r[19], r[20], r[21]) for r in want)
    force_round(spark, table)
    assert read(spark, lake) == want == read(spark, view)


def sql_error(cursor, statement: str) -> tuple[str, str]:
    with pytest.raises(exc.OperationalError) as raised:
        cursor.execute(statement)
    status = raised.value.args[0].status
    return status.sqlState, status.errorMessage


def left_behind(spark, server, db: str, name: str) -> list[str]:
    """Everything a tiered CREATE of ``db.name`` makes that exists."""
    found = [t for t in (f"{db}.{name}", f"{db}_lake.{name}") if spark.catalog.tableExists(t)]
    found += [f"database {d}" for d in (f"{db}_lake", f"{db}_fresh") if spark.catalog.databaseExists(d)]
    if spark.catalog.databaseExists(f"{db}_fresh"):
        # Not the driver session's temporary views (listTables lists them too; other modules make some).
        found += [f"view {db}_fresh.{v.name}" for v in spark.catalog.listTables(f"{db}_fresh") if not v.isTemporary]
    _, states = server.coordinator.load()
    found += [f"registration {s.path}" for s in states.values() if s.path == f"{db}.{name}"]
    return found


@pytest.mark.parametrize("column, why", [
    ("`__tierlake_rank` INT", "reserved for the aliases and helper columns tierlake generates"),
    ("`__TierLake` INT", "reserved for the aliases and helper columns tierlake generates"),
    ("`_file` STRING", "Iceberg metadata column"),
    ("`_pos` BIGINT", "Iceberg metadata column"),
    ("`_partition` STRING", "Iceberg metadata column"),
])
@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_reserved_column_names_are_refused_before_anything_is_made(server, hive_cursor, spark, db, column, why, pk):
    props = "'table.datalake.enabled'='true'" + (", 'primary-key'='id'" if pk else "")
    state, message = sql_error(hive_cursor, f"CREATE TABLE {db}.t (id BIGINT, {column}) TBLPROPERTIES ({props})")
    assert state == "42939" and why in message, message
    assert left_behind(spark, server, db, "t") == []


def test_change_type_is_refused_as_a_log_table_column(server, hive_cursor, spark, db):
    state, message = sql_error(hive_cursor, f"CREATE TABLE {db}.t (id BIGINT, `_change_type` STRING) "
                                            "TBLPROPERTIES ('table.datalake.enabled'='true')")
    assert state == "22023" and "reserved for primary-key tables" in message, message
    assert left_behind(spark, server, db, "t") == []


class Boom(RuntimeError):
    pass


def after(real, step: str):
    """``real``, then a failure: the step made its object and still failed (the worst case to undo)."""

    def failing(*args, **kwargs):
        real(*args, **kwargs)
        raise Boom(f"injected failure after {step}")

    return failing


# (the function of server/tiering/ddl.py replaced, the step named in the error)
STEPS = [
    ("create_stream_table", "create the stream table"),
    ("create_lake_table", "create the lake table"),
    ("register_table", "register the table with the coordinator"),
    ("fresh_view.create", "create the fresh view"),
]


@pytest.mark.parametrize("target, step", STEPS, ids=[s[0] for s in STEPS])
@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_a_create_failing_at_any_step_leaves_nothing_and_runs_again(server, hive_cursor, spark, db, monkeypatch,
                                                                    target, step, pk):
    statement = create_sql(f"{db}.t", pk)
    owner, attr = (fresh_view, "create") if target == "fresh_view.create" else (ddl, target)
    monkeypatch.setattr(owner, attr, after(getattr(owner, attr), step))
    state, message = sql_error(hive_cursor, statement)
    assert f"CREATE TABLE {db}.t failed at step '{step}" in message and "injected failure" in message, message
    assert left_behind(spark, server, db, "t") == []
    monkeypatch.undo()
    run(hive_cursor, statement)
    assert set(left_behind(spark, server, db, "t")) >= {f"{db}.t", f"{db}_lake.t", f"registration {db}.t",
                                                        f"view {db}_fresh.t"}
    insert(hive_cursor, f"{db}.t", [row(1, 1, "+I", pk)])
    force_round(spark, f"{db}.t")
    assert read(spark, f"{db}_fresh.t") == expected([[row(1, 1, "+I", pk)]], pk)


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_struct_fields_named_like_aliases_and_keywords_work(server, hive_cursor, spark, db, pk):
    props = "'table.datalake.enabled'='true'" + (", 'primary-key'='id', 'bucket.num'='2'" if pk else "")
    struct = "STRUCT<d: INT, `_file`: STRING, `select`: ARRAY<STRUCT<`int`: INT, Mixed_1: INT>>>"
    run(hive_cursor, f"CREATE TABLE {db}.t (id BIGINT, s {struct}) TBLPROPERTIES ({props})")
    value = "named_struct('d', 1, '_file', 'x', 'select', array(named_struct('int', 2, 'Mixed_1', 3)))"
    run(hive_cursor, f"INSERT INTO {db}.t VALUES (1, {value}{', NULL' if pk else ''})")
    force_round(spark, f"{db}.t")
    run(hive_cursor, f"INSERT INTO {db}.t VALUES (2, {value}{', NULL' if pk else ''})")
    want = [(1, (1, "x", [(2, 3)])), (2, (1, "x", [(2, 3)]))]
    assert read(spark, f"{db}_lake.t") == want[:1]
    assert read(spark, f"{db}_fresh.t") == want
    with local_merge_rows(spark, 0):
        assert read(spark, f"{db}_fresh.t") == want


@pytest.mark.parametrize("field", ["c:d", "e,f", "g<h>", "a-b", "a b", "x.y", "ün", "a$", "1e5"])
def test_struct_field_names_the_metastore_cannot_hold_are_refused_before_anything_is_made(
        server, hive_cursor, spark, db, field):
    """Before: the stream table was made, the lake table's first commit after its create failed with
    CommitStateUnknownException (the metastore parses `struct<c:d:string>`), and a lake table stayed; with
    a space (or `.`, `$`, Unicode) the tables were made and every read of the fresh view failed
    (CANNOT_RECOGNIZE_HIVE_TYPE: Spark parses the view's `struct<a b:string>`)."""
    state, message = sql_error(hive_cursor, f"CREATE TABLE {db}.t (id BIGINT, s STRUCT<ok: INT, `{field}`: STRING>) "
                                            "TBLPROPERTIES ('table.datalake.enabled'='true')")
    assert state == "22023" and f"STRUCT field name '{field}' cannot be stored in the metastore" in message, message
    assert left_behind(spark, server, db, "t") == []


def test_an_alter_whose_reschedule_fails_sets_the_properties_back(server, hive_cursor, spark, db, monkeypatch):
    run(hive_cursor, create_sql(f"{db}.t", pk=False))

    def fail(*args, **kwargs):
        raise Boom("injected failure in the reschedule")

    monkeypatch.setattr(ddl, "rescheduler", fail)
    state, message = sql_error(hive_cursor, f"ALTER TABLE {db}.t SET TBLPROPERTIES ('table.datalake.freshness'='5 s', "
                                            "'table.datalake.tiering.chunk-rows'='7')")
    assert (f"ALTER TABLE {db}.t failed at step 'reschedule the table': injected failure in the reschedule; "
            "undone: table properties restored") in message, message
    props = dict(spark.sql(f"SHOW TBLPROPERTIES {db}.t").collect())
    assert props["table.datalake.freshness"] == "1 h" and "table.datalake.tiering.chunk-rows" not in props


def test_a_rename_whose_registration_cannot_follow_is_renamed_back(server, hive_cursor, spark, db, monkeypatch):
    run(hive_cursor, create_sql(f"{db}.t", pk=True))
    real = ddl.follow_table_change

    def fail(ctx, path, renamed_to):
        if renamed_to is None:
            return real(ctx, path, renamed_to)
        raise Boom("injected failure moving the registration")

    monkeypatch.setattr(ddl, "follow_table_change", fail)
    state, message = sql_error(hive_cursor, f"ALTER TABLE {db}.t RENAME TO {db}.moved")
    assert "failed at step 'move the registration'" in message and "table renamed back" in message, message
    assert left_behind(spark, server, db, "t") == [f"{db}.t", f"{db}_lake.t", f"database {db}_lake",
                                                   f"database {db}_fresh", f"view {db}_fresh.t",
                                                   f"registration {db}.t"]
    assert not spark.catalog.tableExists(f"{db}.moved") and not spark.catalog.tableExists(f"{db}_fresh.moved")
    monkeypatch.undo()
    insert(hive_cursor, f"{db}.t", [row(1, 1, "+I", True)])
    assert read(spark, f"{db}_fresh.t") == expected([[row(1, 1, "+I", True)]], True)


def test_a_ctas_failing_after_it_registered_leaves_nothing_and_runs_again(server, hive_cursor, spark, db, monkeypatch):
    statement = (f"CREATE TABLE {db}.c TBLPROPERTIES ('table.datalake.enabled'='true') "
                 "AS SELECT 1 AS d, 'x' AS winners")
    monkeypatch.setattr(fresh_view, "create", after(fresh_view.create, "create the fresh view"))
    state, message = sql_error(hive_cursor, statement)
    assert "injected failure after create the fresh view" in message, message
    assert left_behind(spark, server, db, "c") == []
    monkeypatch.undo()
    run(hive_cursor, statement)
    assert read(spark, f"{db}_fresh.c") == [(1, "x")]


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_a_ctas_with_struct_fields_named_by_keywords_is_created_tiered_and_read(server, hive_cursor, spark, db, pk):
    """Found by the differential harness's long run (cases 45 and 540 of seed 5): a tiered CTAS whose query
    has a STRUCT field named `select` was refused, "rendered invalid SQL: Expecting >": the columns' types
    came from Spark's ``simpleString()``, which leaves field names unquoted (``struct<select:double>``), and
    the gateway sent Spark sqlglot's regeneration of the query instead of the client's text, which rewrote
    ``named_struct('select', …)`` as ``STRUCT(… AS select)`` (refused, "cannot parse the query") and
    ``1L`` as ``TRY_CAST(1 AS BIGINT)``."""
    props = "'table.datalake.enabled'='true'" + (", 'primary-key'='id', 'bucket.num'='2'" if pk else "")
    struct = "STRUCT<`select`: DOUBLE, `from`: ARRAY<STRUCT<`int`: INT, x: INT>>, `order`: MAP<STRING, INT>>"
    value = ("CAST(named_struct('select', 1.5D, 'from', array(named_struct('int', 2, 'x', 3)), "
             f"'order', map('k', 4)) AS {struct})")
    run(hive_cursor, f"CREATE TABLE {db}.made TBLPROPERTIES ({props}) AS SELECT 1L AS id, {value} AS s")
    run(hive_cursor, f"INSERT INTO {db}.made (id, s{', _change_type' if pk else ''}) "
                     f"SELECT 2L, {value}{', NULL' if pk else ''}")
    force_round(spark, f"{db}.made")
    s = (1.5, [(2, 3)], {"k": 4})
    want = [(1, s), (2, s)]
    assert read(spark, f"{db}.made") == [r + ((None,) if pk else ()) for r in want]
    assert read(spark, f"{db}_lake.made") == want
    assert read(spark, f"{db}_fresh.made") == want


def test_a_primary_key_table_named_with_a_slash_tiers_many_commits_and_validates(server, hive_cursor, spark, db):
    """Found by the differential harness's long run (case 581 of seed 5): a primary-key table named `a/b`
    was created and written, but a round of two commits failed, TABLE_OR_VIEW_NOT_FOUND on
    ```a`.`b`#snapshot_id_…``: the round read the stream at a snapshot with Iceberg's
    ``DataFrameReader.load(name)``, which takes a name holding '/' for a file path. The same for
    ``sys.validate``'s reads."""
    table = f"{db}.`a/b`"
    run(hive_cursor, f"CREATE TABLE {table} (z STRING, v INT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'primary-key'='z', 'bucket.num'='2')")
    run(hive_cursor, f"INSERT INTO {table} (z, v, _change_type) VALUES ('a', 1, '+I'), ('b', 1, '+I')")
    run(hive_cursor, f"INSERT INTO {table} (z, v, _change_type) SELECT 'a', 2, '+U'")
    force_round(spark, table)
    run(hive_cursor, f"INSERT INTO {table} (z, v, _change_type) VALUES ('b', 0, '-D'), ('c', 3, NULL)")
    run(hive_cursor, f"INSERT INTO {table} (z, v, _change_type) VALUES ('c', 4, '+U')")
    force_round(spark, table)
    assert read(spark, f"{db}_lake.`a/b`") == [("a", 2), ("c", 4)] == read(spark, f"{db}_fresh.`a/b`")
    check = comparison(hive_cursor, table)
    assert check["success"] is True and check["count"] == 0, check
