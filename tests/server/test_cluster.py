"""Every feature on a Spark standalone cluster (issue 50, items 4 and 6): one
``tierlake server --master spark://…`` (a subprocess, as users run it, with one
tiering worker) against a master and one worker from pyspark's own jars
(tests/standalone.py), one core and a small executor. Each test asserts the
rows a user sees through the gateway; what runs tierlake's JVM classes inside
tasks on the executor (a separate JVM, which has only what ``spark.jars``
brings it): the fresh view's pending-key probe (KeySet), its distributed form
(FreshMerge, IncrementalCatalog and FreshEntries readers), Iceberg writes
through ``file:`` (LocalFileSystem).

One server for the module (its start is most of the wall time); each test
has its own tables. Those that wait for rounds are created and written first,
all at once (``seeded``), so their rounds overlap with the tests that need
none (one worker tiers up to four tables at once)."""

from __future__ import annotations

import itertools

import pytest
from pyhive import hive

from tests.conftest import free_port, start_server_process, stop_process, wait_for
from tests.standalone import LocalStandalone

pytestmark = pytest.mark.integration

DB = "cl"
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster():
    standalone = LocalStandalone(cores=1, memory="1g").start()
    yield standalone
    standalone.stop()


@pytest.fixture(scope="module")
def port(cluster, tmp_path_factory):
    conf = [
        f"tierlake.master={cluster.url}",
        "spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1",
        "spark.cores.max=1", "spark.executor.cores=1", "spark.executor.memory=512m",
        "spark.sql.shuffle.partitions=2", "spark.ui.enabled=false",
        "tierlake.coordinator.interval=1 s", "tierlake.tiering.poll-interval=0.3 s",
        "tierlake.tiering.retry-backoff=1 s", "tierlake.tiering.heartbeat-timeout=30 s",
    ]
    port = free_port()
    proc = start_server_process(tmp_path_factory.mktemp("cluster-home"), port, conf, workers=1)
    try:
        yield port
    finally:
        assert stop_process(proc) == 0, proc.stderr.read()[-3000:]


@pytest.fixture
def cur(port):
    conn = hive.connect("127.0.0.1", port, username="cluster")
    cursor = conn.cursor()
    cursor.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    yield cursor
    conn.close()


def rows(cur, sql: str) -> list[tuple]:
    cur.execute(sql)
    return sorted(tuple(r) for r in cur.fetchall())


def plan(cur, sql: str) -> str:
    cur.execute(f"EXPLAIN {sql}")
    return cur.fetchall()[0][0]


def create(cur, columns: str, freshness: str, pk: str | None = None) -> str:
    name = f"{DB}.t{next(_names)}"
    props = f"'table.datalake.enabled'='true', 'table.datalake.freshness'='{freshness}'"
    if pk:
        props += f", 'primary-key'='{pk}', 'bucket.num'='2'"
    cur.execute(f"CREATE TABLE {name} ({columns}) TBLPROPERTIES ({props})")
    return name


def lake(table: str) -> str:
    db, name = table.split(".")
    return f"{db}_lake.{name}"


def fresh(table: str) -> str:
    db, name = table.split(".")
    return f"{db}_fresh.{name}"


def tiered(cur, table: str, expected: list[tuple], columns: str = "*", timeout: float = 120) -> None:
    wait_for(lambda: rows(cur, f"SELECT {columns} FROM {lake(table)}") == expected, timeout,
             f"{expected} in {lake(table)}", every=0.5)


def ctas(cur, values: list[tuple], freshness: str, pk: bool, extra: str = "") -> str:
    """A tiered table made by an atomic CTAS of ``(id, v)`` rows (``v`` a string or a number): they are
    in the stream and the lake at once."""
    name = f"{DB}.t{next(_names)}"
    props = f"'table.datalake.enabled'='true', 'table.datalake.freshness'='{freshness}'{extra}"
    if pk:
        props += ", 'primary-key'='id', 'bucket.num'='2'"
    cur.execute(f"CREATE TABLE {name} TBLPROPERTIES ({props}) AS SELECT * FROM VALUES "
                + ", ".join(f"({i}, {v!r})" for i, v in values) + " AS s(id, v)")
    return name


def first_round_done(cur, table: str) -> None:
    """A new registration is due at once: after that (empty) round, an hour's freshness keeps changes pending."""
    db, name = table.split(".")
    # (A round that commits nothing leaves no row in sys.tiering_rounds; it took an epoch.)
    wait_for(lambda: rows(cur, "SELECT status, tiering_epoch > 0 FROM sys.lake_tiering_status "
                               f"WHERE database_name = '{db}' AND table_name = '{name}'") == [("Scheduled", True)],
             120, f"the first round of {table}", every=0.5)


LAKE_ROWS = [(i, f"lake{i}") for i in range(1, 21)]
MAINTAINED = [(0, "v0"), (1, "w1"), (3, "v3"), (10, "w10"), (11, "w11")]


@pytest.fixture(scope="module")
def seeded(port):
    """The tables whose tests wait for rounds, created and written at the module's start."""
    conn = hive.connect("127.0.0.1", port, username="cluster")
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    tables = {"log": create(cur, "id BIGINT, msg STRING", "1 s"),
              "pk": create(cur, "id BIGINT, v STRING", "1 s", pk="id")}
    cur.execute(f"INSERT INTO {tables['log']} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    cur.execute(f"INSERT INTO {tables['log']} SELECT id + 10, upper(msg) FROM {tables['log']}")  # a Spark job
    cur.execute(f"INSERT INTO {tables['pk']} VALUES (1, 'a', '+I'), (2, 'b', '+I'), (3, 'c', '+I')")
    tables["maintained"] = ctas(cur, [(i, f"v{i}") for i in range(4)], "1 s", pk=True,
                                extra=", 'table.datalake.auto-compaction'='true'")
    cur.execute(f"INSERT INTO {tables['maintained']} VALUES (1, 'w1', '+U'), (10, 'w10', '+I')")
    cur.execute(f"INSERT INTO {tables['maintained']} VALUES (2, NULL, '-D'), (11, 'w11', '+I')")
    # Fresh views: the lake holds LAKE_ROWS at once; an hour's freshness keeps later changes pending.
    tables["fresh_pk"] = ctas(cur, LAKE_ROWS, "1 h", pk=True)
    tables["fresh_log"] = ctas(cur, LAKE_ROWS, "1 h", pk=False)
    yield tables
    conn.close()


def test_the_server_runs_on_the_cluster(cur, cluster, seeded):
    cur.execute("CALL sys.server_info()")
    assert dict(cur.fetchall())["master"] == cluster.url
    apps = cluster.apps()
    assert len(apps) == 1 and apps[0]["cores"] == 1, apps


def test_kv_snapshots_and_leases(cur):
    table = create(cur, "id BIGINT, v STRING", "1 s", pk="id")
    cur.execute(f"INSERT INTO {table} VALUES (1, 'a', '+I'), (2, 'b', '+I')")
    (first,) = rows(cur, f"CALL sys.kv_snapshot('{table}')")
    assert first[4] is True
    cur.execute(f"INSERT INTO {table} (id, v, _change_type) VALUES (1, 'A', '+U'), (3, 'c', '+I')")
    (second,) = rows(cur, f"CALL sys.kv_snapshot('{table}')")
    assert second[4] is True and second[2] > first[2]
    leased = rows(cur, f"CALL sys.acquire_lease(lease_id => 'cl-reader', table => '{table}', "
                       f"snapshots => map(0, {first[1]}L, 1, {first[1]}L))")
    assert [(r[1], r[2], r[3]) for r in leased] == [(0, first[1], "acquired"), (1, first[1], "acquired")]
    cur.execute(f"INSERT INTO {table} VALUES (4, 'd', '+I')")
    (third,) = rows(cur, f"CALL sys.kv_snapshot('{table}')")
    outcomes = {r[1]: r[3] for r in rows(cur, f"CALL sys.expire_kv_snapshots('{table}', retain => 1)")}
    assert outcomes == {first[1]: "leased", second[1]: "expired", third[1]: "retained"}
    cur.execute(f"SHOW TBLPROPERTIES {table} ('tierlake.kv-table')")
    kv_table = cur.fetchall()[0][1]
    assert rows(cur, f"SELECT id, v FROM {kv_table} VERSION AS OF {first[1]}") == [(1, "a"), (2, "b")]
    assert rows(cur, f"SELECT id, v FROM {kv_table}") == [(1, "A"), (2, "b"), (3, "c"), (4, "d")]
    released = rows(cur, "CALL sys.drop_lease('cl-reader')")
    assert {r[3] for r in released} == {"released"}


def test_data_quality(cur):
    table = ctas(cur, [(1, 5.0), (2, -1.0), (3, 7.0)], "1 h", pk=True)
    cur.execute(f"CALL sys.add_expectation('{table}', 'expect_column_values_to_be_between', "
                "map('column', 'v', 'min_value', 0))")
    results = {r[1].split("(")[0]: r for r in rows(cur, f"CALL sys.validate('{table}')")}
    between = results.pop("expect_column_values_to_be_between")
    assert between[2] is False and between[4] == 1 and '"id": 2' in between[5], between
    assert set(results) == {"expect_column_values_to_not_be_null", "expect_column_values_to_be_unique",
                            "tierlake_lake_position_at_most", "tierlake_lake_equals_stream"}
    assert all(r[2] for r in results.values()), results


def test_create_table_as_select(cur):
    source = create(cur, "id BIGINT, amount DOUBLE", "1 s")
    cur.execute(f"INSERT INTO {source} VALUES (1, 50.0), (2, 150.0), (3, 250.0)")
    target = f"{DB}.ctas{next(_names)}"
    cur.execute(f"CREATE TABLE {target} TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='id', "
                f"'bucket.num'='2') AS SELECT id, amount * 2 AS amount FROM {source} WHERE amount > 100")
    assert rows(cur, f"SELECT id, amount FROM {target}") == [(2, 300.0), (3, 500.0)]
    assert rows(cur, f"SELECT id, amount FROM {lake(target)}") == [(2, 300.0), (3, 500.0)]


@pytest.fixture(scope="module")
def pending_views(seeded, port):
    """The fresh-view tables with changes pending after LAKE_ROWS; what their views must show."""
    conn = hive.connect("127.0.0.1", port, username="cluster")
    cur = conn.cursor()
    pk, log = seeded["fresh_pk"], seeded["fresh_log"]
    first_round_done(cur, pk)
    first_round_done(cur, log)
    cur.execute(f"INSERT INTO {pk} VALUES (2, 'new2', '+U'), (3, NULL, '-D'), (30, 'new30', '+I')")
    cur.execute(f"INSERT INTO {log} VALUES (2, 'again2'), (30, 'new30')")
    yield {
        "pk": (pk, sorted([r for r in LAKE_ROWS if r[0] not in (2, 3)] + [(2, "new2"), (30, "new30")])),
        "log": (log, sorted(LAKE_ROWS + [(2, "again2"), (30, "new30")])),
    }
    conn.close()


@pytest.mark.parametrize("kind", ["pk", "log"])
def test_fresh_view_with_pending_changes_in_both_forms(cur, pending_views, kind):
    """Reproduction 6: the fresh view with pending changes failed on the executor
    (``ClassCastException: cannot assign instance of java.lang.invoke.SerializedLambda
    to field org.apache.spark.rdd.MapPartitionsRDD.f``): tierlake's classes were not
    on its class path. Merged in the driver (the lake scan probes a set of pending keys
    on the executor) and by Spark (``tierlake.fresh.local-merge-rows`` 0)."""
    table, expected = pending_views[kind]
    assert "tierlake_inc" not in plan(cur, f"SELECT id, v FROM {fresh(table)}")
    assert rows(cur, f"SELECT id, v FROM {fresh(table)}") == expected
    assert rows(cur, f"SELECT count(*), sum(id) FROM {fresh(table)} WHERE v IS NOT NULL") == [
        (len(expected), sum(i for i, _ in expected))]
    cur.execute("SET `spark.tierlake.fresh.local-merge-rows`=0")
    try:
        assert "tierlake_inc" in plan(cur, f"SELECT id, v FROM {fresh(table)}")
        assert rows(cur, f"SELECT id, v FROM {fresh(table)}") == expected
        assert rows(cur, f"SELECT id, v FROM {fresh(table)} WHERE id = 2") == [r for r in expected if r[0] == 2]
    finally:
        cur.execute("RESET `spark.tierlake.fresh.local-merge-rows`")
    assert rows(cur, f"SELECT id, v FROM {lake(table)}") == LAKE_ROWS  # still pending


def test_ingest_and_log_tiering(cur, seeded):
    table = seeded["log"]
    expected = [(1, "a"), (2, "b"), (3, "c"), (11, "A"), (12, "B"), (13, "C")]
    assert rows(cur, f"SELECT id, msg FROM {table}") == expected
    tiered(cur, table, expected)
    assert rows(cur, f"SELECT id, msg FROM {fresh(table)}") == expected
    # A tierlake UDF over rows: Python workers of the executor import tierlake.
    assert rows(cur, f"SELECT id, tierlake_duration_seconds(concat(CAST(id AS STRING), ' min')) FROM {table}") == [
        (i, 60.0 * i) for i, _ in expected]


def test_primary_key_tiering(cur, seeded):
    table = seeded["pk"]
    tiered(cur, table, [(1, "a"), (2, "b"), (3, "c")], "id, v")
    cur.execute(f"INSERT INTO {table} (id, v, _change_type) VALUES (2, 'B', '+U'), (3, NULL, '-D'), (4, 'd', '+I')")
    tiered(cur, table, [(1, "a"), (2, "B"), (4, "d")], "id, v")


def test_maintenance(cur, seeded):
    table = seeded["maintained"]
    actions = rows(cur, f"CALL sys.run_maintenance('{table}')")  # waits for the next round and its maintenance
    assert actions and not [a for a in actions if a[10]], actions
    assert {a[2] for a in actions} >= {"compaction", "expire_snapshots"}, actions
    compaction = next(a for a in actions if a[2] == "compaction")
    assert compaction[5] >= 1, compaction  # data files rewritten, by a Spark job on the executor
    assert rows(cur, f"SELECT id, v FROM {fresh(table)}") == MAINTAINED
    tiered(cur, table, MAINTAINED, "id, v")


def test_the_executor_has_tierlake_classes(cluster, cur):
    """Last in the module: the executor fetched tierlake's jar, and nothing it ran missed a class
    (LocalFileSystem, file:'s implementation on executors too, is loaded by name)."""
    cur.execute("SELECT 1")
    logs = "\n".join(p.read_text(errors="replace") for p in (cluster.root / "work").glob("app-*/*/stderr"))
    assert "tierlake-internal-" in logs, logs[-3000:]
    missing = [line for line in logs.splitlines()
               if ("ClassNotFoundException" in line or "NoClassDefFoundError" in line) and "io.tierlake" in line]
    assert not missing, missing[:5]
