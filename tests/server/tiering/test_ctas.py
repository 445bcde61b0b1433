"""Atomic CREATE TABLE … AS SELECT of tiered tables, through the real gateway.

A CTAS either leaves the stream table, the lake table, their data and the
coordinator registration all in place, or nothing at all: failing queries,
client cancels and lost races are checked against SHOW TABLES, the
coordinator tables and the files under the warehouse.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from pyhive import exc, hive
from TCLIService import ttypes

from tierlake.server.exceptions import InvalidArgumentError, OperationCancelledError, SqlSyntaxError, TableExistsError
from tierlake.server.runtime.operations import OperationControl
from tierlake.server.tiering import ctas
from tierlake.server.tiering.ctas import StatementHook, _label, _location_key, check_query

# -- unit (no JVM) -------------------------------------------------------------


def test_locations_compare_across_file_uri_spellings():
    assert _location_key("file:/w/a.db/t-1") == _location_key("file:///w/a.db/t-1/") == _location_key("/w/a.db/t-1")
    assert _location_key("file:/w/a.db/t-1") != _location_key("file:/w/a.db/t-2")


def test_hostile_names_cannot_steer_a_staged_location():
    assert _label("../../etc") == "______etc"
    assert _label("We`ird/Name") == "we_ird_name"


class FakeCreate:
    """Records the phases a StatementHook drives."""

    target = "db.t"

    def __init__(self, fail_in=None, if_not_exists=False, control=None):
        self.calls, self.fail_in, self.if_not_exists, self.control = [], fail_in, if_not_exists, control

    def _step(self, name):
        self.calls.append(name)
        if self.fail_in == name:
            raise (TableExistsError if name == "commit" else RuntimeError)(f"{name} broke")

    def begin(self, columns):
        self._step("begin")

    def write(self, frame, cancelled):
        self._step("write")
        if self.control is not None:
            self.control.cancel()  # the client cancels while the query runs
            assert cancelled()

    def commit(self):
        self._step("commit")
        return "state"

    def abort(self, reason):
        self.calls.append(f"abort: {reason}")


def test_hook_commits_a_statement_that_succeeded():
    create = FakeCreate()
    assert StatementHook(create).run([], None) == "state"
    assert create.calls == ["begin", "write", "commit"]


@pytest.mark.parametrize("phase", ["begin", "write"])
def test_hook_aborts_a_statement_that_failed_and_raises_its_error(phase):
    create = FakeCreate(fail_in=phase)
    with pytest.raises(RuntimeError, match=f"{phase} broke"):
        StatementHook(create).run([], None)
    assert create.calls[-1] == f"abort: RuntimeError: {phase} broke" and "commit" not in create.calls


def test_hook_aborts_a_cancelled_statement_and_never_commits():
    control, cancelled_jobs = OperationControl(), []
    create = FakeCreate(control=control)
    with pytest.raises(OperationCancelledError, match="nothing was created"):
        StatementHook(create, control, on_cancel=lambda: cancelled_jobs.append("spark jobs")).run([], None)
    assert create.calls == ["begin", "write", "abort: cancelled by the client"]
    assert cancelled_jobs == ["spark jobs"]


def test_hook_with_if_not_exists_loses_a_race_quietly():
    create = FakeCreate(fail_in="commit", if_not_exists=True)
    assert StatementHook(create).run([], None) is None
    assert create.calls[-1] == "abort: IF NOT EXISTS: the table was created concurrently"
    with pytest.raises(TableExistsError):
        StatementHook(FakeCreate(fail_in="commit")).run([], None)


class FakeCatalog:
    """Tables by name → location, and what recovery did to them."""

    def __init__(self, tables: dict[str, str], taken: set[str] = frozenset()):
        self.tables, self.taken, self.registered, self.removed = dict(tables), set(taken), [], []

    def owned(self, spark, name, location):
        return self.tables.get(str(name)) == location

    def rename(self, spark, source, target):
        if str(target) in self.tables or str(target) in self.taken:
            return False
        self.tables[str(target)] = self.tables.pop(str(source))
        return True

    def register(self, ctx, path, lake, initial, tiered_position=None):
        self.registered.append((str(path), str(lake), tiered_position))
        return None, True

    def remove(self, spark, row):
        self.removed = sorted(n for n, loc in self.tables.items() if loc in (row["stream_location"],
                                                                            row["lake_location"]))
        for name in self.removed:
            del self.tables[name]
        return self.removed


class FakeJournal:
    def __init__(self, rows):
        self.rows, self.finished = rows, {}

    def unfinished(self):
        return self.rows

    def finish(self, ctas_id, state, detail=None):
        self.finished[ctas_id] = (state, detail)


class FakeCoordinator:
    def load(self):
        return None, {}


def journal_row(phase, position=500):
    return dict(ctas_id="c1", database_name="crash", table_name="t", lake_database="crash_lake", lake_table="t",
                staged_stream="sys.ctas_c1_stream", staged_lake="sys.ctas_c1_lake", stream_location="/w/s",
                lake_location="/w/l", created_database=None, state="running", user_name="u", started_at=None,
                phase=phase, tiered_position=position)


STAGED = {"sys.ctas_c1_stream": "/w/s", "sys.ctas_c1_lake": "/w/l"}
BETWEEN = {"crash.t": "/w/s", "sys.ctas_c1_lake": "/w/l"}
RENAMED = {"crash.t": "/w/s", "crash_lake.t": "/w/l"}


@pytest.mark.parametrize("phase,tables,taken,outcome", [
    (None, STAGED, (), "rolled_back"),          # a journal row from before phases existed
    ("staged", STAGED, (), "rolled_back"),
    ("written", STAGED, (), "rolled_back"),     # nothing renamed yet: nobody saw anything
    ("written", BETWEEN, (), "recovered"),      # between the renames: the stream table was visible
    ("renamed", RENAMED, (), "recovered"),
    ("written", BETWEEN, {"crash_lake.t"}, "rolled_back"),  # the lake name was taken meanwhile
])
def test_recovery_finishes_a_statement_past_its_first_rename_and_rolls_back_the_rest(
        monkeypatch, phase, tables, taken, outcome):
    catalog, journal = FakeCatalog(tables, taken), FakeJournal([journal_row(phase)])
    monkeypatch.setattr(ctas, "Journal", lambda spark: journal)
    monkeypatch.setattr(ctas, "coordinator", lambda ctx: FakeCoordinator())
    monkeypatch.setattr(ctas, "_owned", catalog.owned)
    monkeypatch.setattr(ctas, "_rename", catalog.rename)
    monkeypatch.setattr(ctas, "register_table", catalog.register)
    monkeypatch.setattr(ctas, "remove_everything", catalog.remove)
    views = []
    monkeypatch.setattr(ctas.fresh_view, "create", lambda spark, config, stream, lake: views.append(str(stream)))

    (result,) = ctas.recover(type("Ctx", (), {"spark": None, "config": None})())
    assert result["state"] == journal.finished["c1"][0] == outcome
    if outcome == "recovered":
        assert catalog.tables == RENAMED and catalog.removed == []
        assert catalog.registered == [("crash.t", "crash_lake.t", 500)]
        assert views == ["crash.t"]  # the fresh view comes with the recovered table
        assert "registered at start at position 500" in journal.finished["c1"][1]
    else:
        assert catalog.tables == {} and catalog.registered == [] and views == []
        assert "rolled back at start" in journal.finished["c1"][1]


# -- integration ------------------------------------------------------------------

integration = pytest.mark.integration


@pytest.fixture
def db(spark):
    name = "ctas_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE `{name}`")  # its lake database is created by the first CTAS
    return name


@pytest.fixture(scope="module")
def udfs(spark):
    def fail_at_1000(x):
        if x == 1000:
            raise ValueError("row 1000 is poisoned")
        return x

    def slow(x):
        time.sleep(0.01)
        return x

    spark.udf.register("fail_at_1000", fail_at_1000, "bigint")
    spark.udf.register("slow_id", slow, "bigint")


def connect(server, user="ctas"):
    return hive.connect("127.0.0.1", server.gateway.port, username=user).cursor()


def warehouse_files(spark, db: str) -> set[str]:
    root = Path(_location_key(spark.conf.get("spark.sql.warehouse.dir")))
    out = set()
    for sub in (f"{db}.db", f"{db}_lake.db"):
        for dirpath, _, files in os.walk(root / sub):
            out.update(str(Path(dirpath) / f) for f in files)
    return out


def catalog_state(spark, db: str):
    databases = {d for d in (db, f"{db}_lake") if spark.catalog.databaseExists(d)}
    # Not the session's temporary views: the server's background work (a KV snapshot's delta) makes its
    # own in this shared session for as long as it writes, and they are no table of the database.
    tables = {(d, r.tableName) for d in databases for r in spark.sql(f"SHOW TABLES IN `{d}`").collect()
              if not r.isTemporary}
    staged = {r.tableName for r in spark.sql("SHOW TABLES IN sys").collect() if r.tableName.startswith("ctas_")
              and r.tableName != "ctas_journal"}
    registered = {(r.database_name, r.table_name) for r in spark.sql("SELECT * FROM sys.tiering_tables").collect()}
    return tables, staged, registered, warehouse_files(spark, db), databases


def log_rows(spark, db: str, table: str):
    return spark.sql(
        f"SELECT state, detail FROM sys.create_table_as_log WHERE database_name = '{db}' AND table_name = '{table}'"
    ).collect()


@integration
def test_a_query_failing_mid_way_leaves_nothing(server, spark, db, udfs):
    before = catalog_state(spark, db)
    cur = connect(server)
    with pytest.raises(exc.OperationalError) as raised:
        cur.execute(f"CREATE TABLE {db}.t TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='id', "
                    "'bucket.num'='2') AS SELECT fail_at_1000(id) AS id, id * 2 AS v FROM range(2000)")
    assert "row 1000 is poisoned" in str(raised.value)
    assert catalog_state(spark, db) == before  # the lake database it created is gone too
    (row,) = log_rows(spark, db, "t")
    assert row.state == "aborted" and "poisoned" in row.detail
    cur.execute("SELECT 1")  # the connection is still usable
    assert cur.fetchall() == [(1,)]


@integration
def test_a_client_cancel_during_a_long_ctas_leaves_nothing(server, spark, db, udfs):
    before = catalog_state(spark, db)
    cur = connect(server)
    # One task (one partition): the other core stays free for this test's own reads of the CTAS's
    # progress. With a task per core they waited for the whole query, and the cancel came too late.
    cur.execute(f"CREATE TABLE {db}.slow TBLPROPERTIES ('table.datalake.enabled'='true') "
                "AS SELECT slow_id(id) AS id FROM range(0, 6000, 1, 1)", async_=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # cancel once it has staged its tables and runs the query
        rows = log_rows(spark, db, "slow")
        if rows and rows[0].state == "running" and catalog_state(spark, db)[1]:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the CTAS never started running")
    cur.cancel()
    state = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = cur.poll().operationState
        if state != ttypes.TOperationState.RUNNING_STATE:
            break
    assert state == ttypes.TOperationState.CANCELED_STATE
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and log_rows(spark, db, "slow")[0].state == "running":
        time.sleep(0.2)
    (row,) = log_rows(spark, db, "slow")
    assert (row.state, row.detail) == ("aborted", "cancelled by the client")
    assert catalog_state(spark, db) == before


@integration
def test_a_successful_ctas_is_visible_at_once_and_the_next_round_tiers_only_what_is_new(server, spark, db):
    from tierlake.server.tiering.worker import start_workers

    cur = connect(server)
    cur.execute(f"CREATE TABLE {db}.orders TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='id', "
                "'bucket.num'='2', 'table.datalake.freshness'='1 s') "
                "AS SELECT id, CAST(id AS DOUBLE) AS amount FROM range(100)")
    (table_id, path, lake, _status, rows), = cur.fetchall()
    assert (path, lake, rows) == (f"{db}.orders", f"{db}_lake.orders", 100)
    cur.execute(f"SELECT table_name, last_error FROM sys.lake_tiering_status WHERE database_name = '{db}'")
    assert cur.fetchall() == [("orders", None)]
    cur.execute(f"SELECT count(*), sum(amount) FROM {db}_lake.orders")
    assert cur.fetchall() == [(100, float(sum(range(100))))]
    cur.execute(f"SELECT state FROM sys.create_table_as_log WHERE database_name = '{db}'")
    assert cur.fetchall() == [("committed",)]

    cur.execute(f"INSERT INTO {db}.orders (id, amount, _change_type) VALUES (5, -1.0, '+U'), (500, 1.0, NULL)")
    workers = start_workers(server, 1)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = spark.sql(f"SELECT rows, start_position, end_position FROM sys.tiering_rounds "
                             f"WHERE table_id = {table_id} AND outcome = 'finished'").collect()
            if done:
                break
            time.sleep(0.3)
        else:
            pytest.fail("no round finished")
    finally:
        for w in workers:
            w.stop()
        for w in workers:
            w.join(timeout=120)
    (round_,) = done
    assert (round_.rows, round_.start_position, round_.end_position) == (2, 1, 2)  # only the new commit
    cur.execute(f"SELECT count(*), min(amount), max(id) FROM {db}_lake.orders")
    assert cur.fetchall() == [(101, -1.0, 500)]


@integration
def test_if_not_exists_and_an_existing_table(server, spark, db):
    cur = connect(server)
    statement = (f"CREATE TABLE {{}} {db}.e TBLPROPERTIES ('table.datalake.enabled'='true') "
                 "AS SELECT id FROM range({})")
    cur.execute(statement.format("", 3))
    cur.execute(statement.format("IF NOT EXISTS", 7))
    assert cur.fetchall() == []
    with pytest.raises(exc.OperationalError) as raised:
        cur.execute(statement.format("", 9))
    assert "already exists" in str(raised.value) and "42P07" in str(raised.value)
    assert spark.table(f"{db}_lake.e").count() == 3 and spark.table(f"{db}.e").count() == 3


@integration
def test_concurrent_creators_of_one_name_one_wins_and_the_loser_leaves_nothing(server, spark, db):
    outcomes: dict[int, object] = {}

    def create(n: int) -> None:
        cur = connect(server, f"racer{n}")
        try:
            cur.execute(f"CREATE TABLE {db}.race TBLPROPERTIES ('table.datalake.enabled'='true') "
                        f"AS SELECT id, {n} AS who FROM range(50)")
            outcomes[n] = "created"
        except exc.OperationalError as e:
            outcomes[n] = str(e)

    threads = [threading.Thread(target=create, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    winners = [n for n, o in outcomes.items() if o == "created"]
    assert len(winners) == 1, outcomes
    loser = next(o for n, o in outcomes.items() if n not in winners)
    assert "already exists" in loser
    who = {r.who for t in (f"{db}.race", f"{db}_lake.race") for r in spark.table(t).collect()}
    assert who == set(winners)
    _, staged, registered, _, _ = catalog_state(spark, db)
    assert not staged and (db, "race") in registered
    states = sorted(r.state for r in log_rows(spark, db, "race"))
    assert states == ["aborted", "committed"] or states == ["committed"]  # a loser may be refused before it begins


@integration
def test_call_create_table_as_with_properties(server, spark, db):
    cur = connect(server)
    cur.execute(
        f"CALL sys.create_table_as('{db}.c', 'SELECT id, id % 3 AS k FROM range(10)', "
        "properties => map('primary-key', 'id', 'bucket.num', '2'))"
    )
    ((_, path, lake, _, rows),) = cur.fetchall()
    assert (path, lake, rows) == (f"{db}.c", f"{db}_lake.c", 10)
    assert "_change_type" in spark.table(f"{db}.c").columns  # a primary-key stream table
    with pytest.raises(exc.OperationalError) as raised:
        cur.execute(f"CALL sys.create_table_as('{db}.d', 'DROP TABLE {db}.c')")
    assert "single SELECT" in str(raised.value)
    assert spark.catalog.tableExists(f"{db}.c") and not spark.catalog.tableExists(f"{db}.d")
    with pytest.raises(exc.OperationalError) as raised:
        cur.execute(f"CALL sys.create_table_as('{db}.d', 'SELECT 1 AS a', map('table.datalake.enabled', 'false'))")
    assert "cannot be 'false'" in str(raised.value)


@integration
def test_plain_iceberg_ctas_keeps_sparks_own_atomicity(server, spark, db):
    cur = connect(server)
    with pytest.raises(exc.OperationalError) as raised:  # relayed to Spark, whose sessions do not see driver UDFs
        cur.execute(
            f"CREATE TABLE {db}.plain USING iceberg AS SELECT CASE WHEN id = 1000 "
            "THEN raise_error('row 1000 is poisoned') ELSE id END AS id FROM range(2000)"
        )
    assert "row 1000 is poisoned" in str(raised.value)
    assert not spark.catalog.tableExists(f"{db}.plain")
    cur.execute(f"CREATE TABLE {db}.plain USING iceberg AS SELECT id FROM range(5)")
    assert spark.table(f"{db}.plain").count() == 5
    assert (db, "plain") not in catalog_state(spark, db)[2]  # not registered for tiering


@integration
def test_beeline_ctas_is_polled_to_the_end_and_a_failing_one_reports_the_error(server, spark, db, beeline, udfs):
    result = beeline.run(
        f"CREATE TABLE {db}.bl TBLPROPERTIES ('table.datalake.enabled'='true') AS SELECT id FROM range(20);\n"
        f"CREATE TABLE {db}.bad TBLPROPERTIES ('table.datalake.enabled'='true') "
        "AS SELECT fail_at_1000(id) AS id FROM range(2000);\n",
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert f"{db}.bl,{db}_lake.bl" in out, out[-3000:]
    assert "row 1000 is poisoned" in out
    assert spark.table(f"{db}_lake.bl").count() == 20 and not spark.catalog.tableExists(f"{db}.bad")


@integration
@pytest.mark.parametrize("form", ["create", "call"])
def test_a_ctas_whose_query_yields_a_null_key_is_refused_readably_and_leaves_nothing(server, spark, db, form):
    before = catalog_state(spark, db)
    cur = connect(server)
    query = "SELECT CAST(IF(id = 3, NULL, id) AS BIGINT) AS id, id * 2 AS v FROM range(5)"
    statement = (f"CREATE TABLE {db}.n TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='id') "
                 f"AS {query}" if form == "create" else
                 f"CALL sys.create_table_as('{db}.n', '{query}', map('primary-key', 'id'))")
    with pytest.raises(exc.OperationalError) as raised:
        cur.execute(statement)
    status = raised.value.args[0].status
    assert status.sqlState == "23502", status
    assert status.errorMessage.endswith(
        f"CREATE TABLE {db}.n AS SELECT refused: the query yields a NULL in the key column(s) id; key columns "
        "must not be NULL (filter the rows or coalesce the keys). Nothing was created"), status.errorMessage
    assert "java" not in status.errorMessage.lower()
    assert catalog_state(spark, db) == before


# What Spark's parser takes as one query (it decides, not sqlglot's reading of Spark SQL: that refused
# VALUES and TABLE, which plain Spark takes after CREATE TABLE … AS).
QUERIES = [
    ("SELECT 1 AS a", None),
    ("WITH x AS (SELECT 1 AS a) SELECT a FROM x", None),
    ("SELECT 1 AS a UNION ALL SELECT 2", None),
    ("  select id from range(10) ;", None),
    ("VALUES (1, 'a'), (2, 'b')", None),
    ("TABLE sys.tiering_tables", None),
    ("FROM range(3) SELECT id", None),
    ("SELECT 1 AS a -- ; DROP TABLE t", None),
    ("(SELECT 1 AS a)", None),
    ("DROP TABLE shop.orders", InvalidArgumentError),
    ("INSERT INTO t SELECT 1", InvalidArgumentError),
    ("WITH x AS (SELECT 1 AS a) INSERT INTO t SELECT * FROM x", InvalidArgumentError),
    ("CACHE TABLE c AS SELECT 1", InvalidArgumentError),
    ("SELECT 1; DROP TABLE t", InvalidArgumentError),
    ("SELECT 1 AS a; SELECT 2", InvalidArgumentError),
    ("", InvalidArgumentError),
    ("SELECT (", SqlSyntaxError),
    ("DROP", SqlSyntaxError),
]


@integration
@pytest.mark.parametrize("query, error", QUERIES)
def test_a_ctas_query_is_what_sparks_own_parser_takes_as_one_query(spark, query, error):
    if error is None:
        assert check_query(spark, query) == query.strip().rstrip(";").rstrip()
    else:
        with pytest.raises(error):
            check_query(spark, query)


@integration
def test_a_tiered_ctas_takes_values_and_table_as_plain_spark_does(server, spark, db):
    cur = connect(server)
    cur.execute(f"CREATE TABLE {db}.vals TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='id', "
                "'bucket.num'='1') AS VALUES (1, 'a'), (2, 'b') AS v(id, name)")
    cur.execute(f"CREATE TABLE {db}.copied TBLPROPERTIES ('table.datalake.enabled'='true') AS TABLE {db}.vals")
    for table in ("vals", "copied"):
        cur.execute(f"SELECT id, name FROM {db}.{table} ORDER BY id")
        assert cur.fetchall() == [(1, "a"), (2, "b")], table
    with pytest.raises(exc.OperationalError) as raised:
        cur.execute(f"CREATE TABLE {db}.bad TBLPROPERTIES ('table.datalake.enabled'='true') "
                    "AS SELECT 1 AS a; DROP TABLE shop.orders")
    assert not spark.catalog.tableExists(f"{db}.bad")
    assert "42601" in str(raised.value), raised.value  # Spark parses the whole statement first: two statements
