"""The fixed cost of a round (issue 18): each of its tables is loaded once, an
unchanged lake schema is not synced again, the fresh view is re-pinned once
per round however many lake commits it made, and what a round writes is
the same as before.

Rounds run in the test's thread (no worker, no coordinator), as in
test_fresh_views.py.
"""

from __future__ import annotations

import itertools
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.server.tiering.conftest import assign, coordinator_state, handle, run
from tierlake.server.changelog import fresh_view, lake_schema, lake_write, planner
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.maintenance import tables as table_maintenance
from tierlake.server.runtime import session
from tierlake.server.runtime.session import iceberg_table, private_session
from tierlake.server.tiering import round as round_module
from tierlake.server.tiering.round import run_round
from tierlake.server.tiering.worker import Worker

pytestmark = pytest.mark.integration

DB = "round_cost"
_counter = itertools.count()


def create(cursor, pk: bool) -> tuple[str, str, str]:
    name = f"t{next(_counter)}_{'pk' if pk else 'log'}"
    run(cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h'"
    if pk:
        props += ", 'primary-key'='id', 'bucket.num'='2'"
    run(cursor, f"CREATE TABLE {DB}.{name} (id BIGINT, v DOUBLE) TBLPROPERTIES ({props})")
    return f"{DB}.{name}", f"{DB}_lake.{name}", f"{DB}_fresh.{name}"


_round_sessions: dict[int, object] = {}


def round_session(spark):
    """A session of the test's own for the rounds whose session settings a test checks, as a worker's
    round thread has one (Worker.round_session): the server's session is shared with its other threads
    (an atomic CTAS sets the bucketed-merge settings on it while it runs), which made those checks
    depend on what else the server did at that moment."""
    found = _round_sessions.get(id(spark))
    if found is None:
        found = _round_sessions[id(spark)] = private_session(spark)
        lake_write.restore(found, {k: None for k in lake_write.BUCKETED_MERGE_CONF})
    return found


def one_round(spark, table: str, chunk_rows: int | None = None):
    result = run_round(planner.plan_round(handle(spark, table, chunk_rows, job_id="test")), check_epoch=lambda: None)
    assert fresh_view.settle()  # the round's re-pin, which runs behind it
    return result


@pytest.fixture
def loads(monkeypatch):
    """Every ``iceberg_table`` call in the test's thread (the server's threads load their own), by table
    name (the modules imported the function)."""
    seen: list[str] = []
    original = session.iceberg_table
    me = threading.get_ident()

    def counted(spark, name):
        if threading.get_ident() == me:
            seen.append(name.replace("`", ""))
        return original(spark, name)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("tierlake.") and \
                getattr(module, "iceberg_table", None) is original:
            monkeypatch.setattr(module, "iceberg_table", counted)
    return seen


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_a_round_of_several_commits_loads_each_table_once_and_repins_the_view_once(
        hive_cursor, spark, monkeypatch, loads, pk):
    table, lake, fresh = create(hive_cursor, pk)
    for i in range(3):  # three stream commits, one chunk (and one lake commit) each
        spark.sql(f"INSERT INTO {table} VALUES ({i}, {i}.0{', NULL' if pk else ''})")
    repins = []
    original = fresh_view._create_view
    monkeypatch.setattr(fresh_view, "_create_view", lambda *a, **k: (repins.append(a[1]), original(*a, **k)))
    lake_before = iceberg_table(spark, lake).currentSnapshot()
    del loads[:]

    result = one_round(spark, table, chunk_rows=1)

    assert result.commits == 3 and result.rows == 3
    assert sorted(loads) == sorted([table, lake]), loads
    # Other tests' background rounds re-pin their own views through the same function.
    assert [str(path) for path in repins if str(path) == fresh] == [fresh], repins
    head = iceberg_table(spark, lake).currentSnapshot()
    ancestors, snapshot = 0, head
    while snapshot is not None and (lake_before is None or snapshot.snapshotId() != lake_before.snapshotId()):
        ancestors += 1
        snapshot = None if snapshot.parentId() is None else iceberg_table(spark, lake).snapshot(snapshot.parentId())
    assert ancestors >= 3  # every chunk reached main
    text = spark.sql(f"SHOW CREATE TABLE {fresh}").collect()[0][0]
    assert f"VERSION AS OF {head.snapshotId()}" in text, text
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {fresh}").collect())
    assert rows == sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == \
        [(i, float(i)) for i in range(3)]


class Reporting:
    """A worker's client that records when the round's finishing report returned (``fail``: it raises)."""

    def __init__(self, server, events: list[str], fail: bool = False):
        self.inner, self.events, self.fail = LocalClient(server), events, fail

    def call(self, procedure, **arguments):
        if arguments.get("finished_tables"):
            if self.fail:
                self.events.append("report failed")
                raise ConnectionError("the coordinator went away")
            rows = self.inner.call(procedure, **arguments)
            self.events.append("reported")
            return rows
        if arguments.get("failed_tables"):
            self.events.append("failure reported")
        return self.inner.call(procedure, **arguments)


@pytest.mark.parametrize("fail", [False, True], ids=["reported", "report-failed"])
def test_a_workers_round_repins_the_fresh_view_after_its_report(server, hive_cursor, spark, monkeypatch, fail):
    """The re-pin's view commit and metastore update run after the coordinator has the round, not beside its
    state commit; a report that fails still gets the view re-pinned."""
    table, lake, fresh = create(hive_cursor, pk=True)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0, NULL), (2, 2.0, NULL)")
    events: list[str] = []
    original = fresh_view.after_lake_commit
    monkeypatch.setattr(fresh_view, "after_lake_commit",
                        lambda table: (events.append(f"re-pin {table.stream}"), original(table)))
    job = f"job-repin-{fail}"
    table_id, epoch = assign(LocalClient(server), job, table)

    Worker(spark, Reporting(server, events, fail=fail), job, server.config).tier(table_id, table, epoch)

    assert fresh_view.settle()
    assert events == (["report failed", f"re-pin {table}", "failure reported"] if fail
                      else ["reported", f"re-pin {table}"]), events
    head = iceberg_table(spark, lake).currentSnapshot()
    text = spark.sql(f"SHOW CREATE TABLE {fresh}").collect()[0][0]
    assert f"VERSION AS OF {head.snapshotId()}" in text, text
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {fresh}").collect()) == [(1, 1.0), (2, 2.0)]
    if not fail:
        assert coordinator_state(server, table).tiered_position == int(head.summary()["tiering.source-position"])


def test_a_primary_key_tables_first_round_appends_its_winners_without_a_shuffle(hive_cursor, spark, monkeypatch):
    """Into a lake that has no snapshot, the first chunk's winners are appended (tiering_pk_load.sql.j2),
    one stream bucket per task: no join against the empty table, no exchange. Later rounds merge."""
    table, lake, _ = create(hive_cursor, pk=True)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0, '+I'), (2, 2.0, NULL), (4, 4.0, NULL)")
    spark.sql(f"INSERT INTO {table} VALUES (2, 2.5, '+U'), (3, 3.0, NULL), (1, NULL, '-D')")
    statements = []
    original = lake_write.ChangelogWrite.commit
    monkeypatch.setattr(lake_write.ChangelogWrite, "commit",
                        lambda self, properties: (statements.append(self.statement), original(self, properties))[1])
    tracker, group = spark.sparkContext.statusTracker(), f"first-round-{next(_counter)}"
    spark.sparkContext.setJobGroup(group, "a primary-key table's first round")
    try:
        assert one_round(spark, table).rows == 6
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
    assert statements[0].lstrip().startswith("SELECT"), statements[0][:200]
    assert jobs and all(len(job.stageIds) == 1 for job in jobs), [list(job.stageIds) for job in jobs]
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == [(2, 2.5), (3, 3.0), (4, 4.0)]
    files = spark.sql(f"SELECT count(*) FROM {lake}.files").collect()[0][0]
    assert files <= 2  # one per bucket, written by the task that read it

    spark.sql(f"INSERT INTO {table} VALUES (4, NULL, '-D'), (5, 5.0, NULL)")
    assert one_round(spark, table).rows == 2
    assert statements[1].lstrip().startswith("MERGE"), statements[1][:200]
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == [(2, 2.5), (3, 3.0), (5, 5.0)]


def tiering_branches(spark, lake: str) -> list[str]:
    return [str(r) for r in iceberg_table(spark, lake).refs().keySet() if str(r).startswith("tierlake_")]


def test_a_primary_key_round_prepares_its_merge_while_its_branch_is_created(hive_cursor, spark, monkeypatch):
    """The branch's creation (a lake commit) overlaps reading the chunk's files and rendering the MERGE."""
    table, lake, _ = create(hive_cursor, pk=True)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0, NULL), (2, 2.0, '+I')")
    prepared, threads = threading.Event(), []
    original_files, original_open = lake_write.chunk_files, round_module.open_branch
    monkeypatch.setattr(lake_write, "chunk_files", lambda *a, **k: (prepared.set(), original_files(*a, **k))[1])

    def opened_once_prepared(*args, **kwargs):
        threads.append(threading.get_ident())
        assert prepared.wait(60), "the chunk's write was not prepared while its branch was created"
        return original_open(*args, **kwargs)

    monkeypatch.setattr(round_module, "open_branch", opened_once_prepared)
    result = one_round(spark, table)

    assert result.rows == 2 and threads and threads[0] != threading.get_ident()
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == [(1, 1.0), (2, 2.0)]
    assert tiering_branches(spark, lake) == []


def test_a_write_that_fails_before_its_branch_exists_leaves_no_branch(hive_cursor, spark, monkeypatch):
    table, lake, _ = create(hive_cursor, pk=True)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0, NULL)")
    original_open = round_module.open_branch

    def late(*args, **kwargs):
        time.sleep(2)  # the write below fails long before the branch exists
        return original_open(*args, **kwargs)

    def unreadable(*args, **kwargs):
        raise RuntimeError("the stream's manifests are unreadable")

    monkeypatch.setattr(round_module, "open_branch", late)
    monkeypatch.setattr(lake_write, "chunk_files", unreadable)
    with pytest.raises(RuntimeError, match="manifests are unreadable"):
        one_round(spark, table)
    assert tiering_branches(spark, lake) == []
    assert spark.sql(f"SELECT count(*) FROM {lake}").collect()[0][0] == 0

    monkeypatch.undo()
    assert one_round(spark, table).rows == 1  # the next round tiers the chunk
    assert tiering_branches(spark, lake) == []


def test_an_unchanged_schema_is_not_synced_again_a_changed_one_is(hive_cursor, spark, monkeypatch):
    table, lake, _ = create(hive_cursor, pk=False)
    syncs = []
    original = lake_schema._sync
    # Only this table's: the server's own threads (KV snapshots of other tests' tables) sync theirs meanwhile.
    monkeypatch.setattr(lake_schema, "_sync",
                        lambda *a: ((syncs.append(a[1]) if str(a[1]) == table else None), original(*a))[1])
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0)")
    one_round(spark, table)
    spark.sql(f"INSERT INTO {table} VALUES (2, 2.0)")
    before = len(syncs)
    one_round(spark, table)
    assert len(syncs) == before  # same schemas, same recorded field ids: answered from memory

    spark.sql(f"ALTER TABLE {table} ADD COLUMN note STRING")
    spark.sql(f"INSERT INTO {table} (id, v, note) VALUES (3, 3.0, 'three')")
    one_round(spark, table)
    assert len(syncs) == before + 1
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN note TO remark")
    spark.sql(f"INSERT INTO {table} (id, v, remark) VALUES (4, 4.0, 'four')")
    one_round(spark, table)
    assert len(syncs) >= before + 2
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT id, v, remark FROM {lake}").collect())
    assert rows == [(1, 1.0, None), (2, 2.0, None), (3, 3.0, "three"), (4, 4.0, "four")]

    # A lake column renamed by hand changes the lake's schema: synced again, and it carries nothing any more.
    spark.sql(f"ALTER TABLE {lake} RENAME COLUMN remark TO by_hand")
    spark.sql(f"INSERT INTO {table} (id, v, remark) VALUES (5, 5.0, 'five')")
    synced = len(syncs)
    one_round(spark, table)
    assert len(syncs) == synced + 1
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, remark FROM {lake} WHERE id = 5").collect()) == \
        [(5, "five")]


def test_a_primary_key_round_merges_bucket_by_bucket_and_restores_the_session(hive_cursor, spark, monkeypatch):
    """Stream and lake tables are bucketed alike by the key: the round's MERGE shuffles neither the chunk
    nor the lake table by key (Spark's storage-partitioned join, ``lake_write.bucketed_merge``), and the
    session's settings are as they were once it ran."""
    table, lake, _ = create(hive_cursor, pk=True)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0, NULL), (2, 2.0, NULL), (3, 3.0, NULL)")
    one_round(spark, table)  # the lake holds rows: the MERGE reads them
    spark.sql(f"INSERT INTO {table} VALUES (2, 20.0, '+U'), (3, 3.0, '-D'), (4, 4.0, '+I')")
    key = "spark.sql.sources.v2.bucketing.enabled"
    rounds = round_session(spark)
    before = rounds.conf.get(key, None)
    statements, seen = [], []
    original_commit, original_run = lake_write.ChangelogWrite.commit, lake_write.with_commit_properties
    monkeypatch.setattr(lake_write.ChangelogWrite, "commit",
                        lambda self, properties: (statements.append(self.statement), original_commit(self, properties)))

    def explained(session, properties, fn):
        shuffle_by_key = re.compile(r"Exchange hashpartitioning\(id#")
        seen.append(("on", bool(shuffle_by_key.search(session.sql("EXPLAIN " + statements[-1]).collect()[0][0]))))
        session.conf.set(key, "false")  # the control: the same statement without the settings
        try:
            seen.append(("off", bool(shuffle_by_key.search(session.sql("EXPLAIN " + statements[-1]).collect()[0][0]))))
        finally:
            session.conf.set(key, "true")
        return original_run(session, properties, fn)

    monkeypatch.setattr(lake_write, "with_commit_properties", explained)
    one_round(rounds, table)

    assert seen == [("on", False), ("off", True)]
    assert rounds.conf.get(key, None) == before
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == [(1, 1.0), (2, 20.0), (4, 4.0)]


def test_a_bucketed_merge_that_fails_runs_again_without_the_settings(hive_cursor, spark, monkeypatch, caplog):
    """A storage-partitioned-join failure (a Spark or Iceberg defect on some layout) costs a second try,
    not the round: the MERGE committed nothing, so it runs again as Spark plans it by default."""
    table, lake, _ = create(hive_cursor, pk=True)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0, NULL), (2, 2.0, NULL)")
    key = "spark.sql.sources.v2.bucketing.enabled"
    original, tries = lake_write.with_commit_properties, []

    def failing_when_bucketed(session, properties, fn):
        tries.append(session.conf.get(key, None))
        if session.conf.get(key, None) == "true":
            raise RuntimeError("Can't zip RDDs with unequal numbers of partitions")
        return original(session, properties, fn)

    monkeypatch.setattr(lake_write, "with_commit_properties", failing_when_bucketed)
    with caplog.at_level("WARNING", logger="tierlake.tiering"):
        result = one_round(round_session(spark), table)

    assert result.rows == 2 and tries[0] == "true" and tries[-1] != "true", tries
    assert "running it again without the storage-partitioned join settings" in caplog.text
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == [(1, 1.0), (2, 2.0)]


@pytest.mark.parametrize("key_type, keys", [
    ("STRING", ["'a'", "'b'", "'c'", "'d'"]),
    ("DATE", ["DATE'2026-01-01'", "DATE'2026-01-02'", "DATE'2026-01-03'", "DATE'2026-01-04'"]),
    ("DECIMAL(10, 2)", ["1.50", "2.50", "3.50", "4.50"]),
    ("INT", ["1", "2", "3", "4"]),
])
def test_a_bucketed_merge_on_keys_of_every_bucketable_type(hive_cursor, spark, key_type, keys):
    """The storage-partitioned join has failed on some bucket key types (apache/iceberg#15349, a string
    bucket key): every kind of key a primary key may have tiers the same rows."""
    name = f"t{next(_counter)}_key"
    run(hive_cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    run(hive_cursor, f"CREATE TABLE {DB}.{name} (k {key_type}, v DOUBLE) TBLPROPERTIES ("
                     "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h', 'primary-key'='k', "
                     "'bucket.num'='2')")
    table, lake = f"{DB}.{name}", f"{DB}_lake.{name}"
    a, b, c, d = keys
    spark.sql(f"INSERT INTO {table} VALUES ({a}, 1.0, NULL), ({b}, 2.0, NULL), ({c}, 3.0, NULL)")
    one_round(spark, table)
    spark.sql(f"INSERT INTO {table} VALUES ({b}, 20.0, '+U'), ({c}, 3.0, '-D'), ({d}, 4.0, '+I')")
    one_round(spark, table)
    got = sorted(r["v"] for r in spark.sql(f"SELECT v FROM {lake}").collect())
    assert got == [1.0, 4.0, 20.0]
    expected = spark.sql(f"SELECT * FROM VALUES ({a}, 1.0), ({b}, 20.0), ({d}, 4.0)").collect()
    expected = sorted(tuple(r) for r in expected)
    assert sorted(tuple(r) for r in spark.sql(f"SELECT k, v FROM {lake}").collect()) == expected


def test_java_maps_and_sets_move_as_one_json_text(hive_cursor, spark):
    from tierlake.server.runtime import jvm

    table, lake, _ = create(hive_cursor, pk=True)
    stream_table = iceberg_table(spark, table)
    assert jvm.string_map(stream_table.properties()) == \
        {str(k): str(v) for k, v in dict(stream_table.properties()).items()}
    assert sorted(jvm.string_list(iceberg_table(spark, lake).refs().keySet())) == \
        sorted(str(n) for n in iceberg_table(spark, lake).refs().keySet())
    assert jvm.jclass("java.lang.Integer") is jvm.jclass("java.lang.Integer")
    assert jvm.string_map({"a": 1}) == {"a": "1"} and jvm.string_list(("x",)) == ["x"]  # Python values as they are


def jobs_of(spark, fn) -> int:
    """Spark jobs ``fn`` started from the test's thread (its job group; the re-pin thread has its own)."""
    group = f"round-cost-{next(_counter)}"
    sc = spark.sparkContext
    sc.setJobGroup(group, "round cost test")
    try:
        fn()
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)
    sc._jsc.sc().listenerBus().waitUntilEmpty()  # the status tracker hears of jobs through the listener bus
    return len(sc.statusTracker().getJobIdsForGroup(group))


def data_files(spark, table: str) -> list[tuple[str, int]]:
    return [(r[0], r[1]) for r in spark.sql(f"SELECT file_path, record_count FROM {table}.files").collect()]


def pending(spark, table: str):
    """The plan of the table's next round and its first chunk."""
    plan = planner.plan_round(handle(spark, table))
    return plan, plan.chunks(1_000_000)[0]


def why_not_copied(spark, table: str) -> str | None:
    from tierlake.server.changelog import file_copy

    plan, chunk = pending(spark, table)
    return file_copy.blocker(plan.handle, chunk)


def test_a_primary_key_chunks_file_list_is_read_from_the_manifests_without_a_spark_job(hive_cursor, spark):
    """``lake_write.chunk_files`` (the driver's manifest read) lists what the ``entries`` query lists, for a
    range from the first snapshot, a later range over merged manifests, and a range a compaction and a
    manifest rewrite of the stream rewrote."""
    table, _, _ = create(hive_cursor, pk=True)
    # Appends merge their manifests from the second on: entries move to EXISTING with their sequence number.
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('commit.manifest.min-count-to-merge' = '2')")

    def both(chunk, loaded):
        via_entries = spark.sql(lake_write._files_statement(loaded, chunk),
                                args={"start_position": chunk.start_position, "end_position": chunk.end_position})
        listed = []
        assert jobs_of(spark, lambda: listed.append(lake_write.chunk_files(loaded, chunk))) == 0
        frame = listed[0]
        assert frame._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LocalRelation"
        return sorted(tuple(r) for r in frame.collect()), sorted(tuple(r) for r in via_entries.collect())

    for i in range(3):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, {i}.0, NULL), ({i + 10}, {i}.5, NULL)")
    plan, chunk = pending(spark, table)
    assert chunk.start_snapshot_id is None and not chunk.rewritten
    listed, expected = both(chunk, plan.handle)
    assert len({r[1] for r in listed}) == 3 and {r[2] for r in listed} == {0, 1}, listed  # 3 commits, 2 buckets
    assert listed == expected
    one_round(spark, table)

    for i in range(3, 6):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, {i}.0, NULL), ({i + 10}, {i}.5, '-D')")
    plan, chunk = pending(spark, table)
    assert chunk.start_snapshot_id is not None and not chunk.rewritten
    listed, expected = both(chunk, plan.handle)
    assert len({r[1] for r in listed}) == 3 and min(r[1] for r in listed) > chunk.start_position, listed
    assert listed == expected

    spark.sql(f"CALL spark_catalog.system.rewrite_data_files(table => '{table}', "
              "options => map('min-input-files', '1', 'rewrite-all', 'true'))")
    spark.sql(f"CALL spark_catalog.system.rewrite_manifests('{table}')")
    compacted = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    spark.sql(f"INSERT INTO {table} VALUES (6, 6.0, NULL)")  # the range now has the replace commits inside it
    plan, chunk = pending(spark, table)
    assert chunk.rewritten
    listed, expected = both(chunk, plan.handle)
    assert len({r[1] for r in listed}) == 4 and listed == expected
    assert compacted and not {r[0] for r in listed} & compacted  # the appends' own files, not the compacted ones
    one_round(spark, table)
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {table.replace(DB, DB + '_lake', 1)}").collect()) \
        == [(i, float(i)) for i in range(7)] + [(i + 10, i + 0.5) for i in range(3)]
    run(hive_cursor, f"DROP TABLE {table}")


def test_a_log_round_copies_the_files_its_appends_added_into_the_lake_without_a_spark_job(hive_cursor, spark):
    table, lake, fresh = create(hive_cursor, pk=False)
    for i in range(3):  # a data file each
        spark.sql(f"INSERT INTO {table} VALUES ({i}, {i}.0)")
    stream_files = data_files(spark, table)

    assert jobs_of(spark, lambda: one_round(spark, table)) == 0

    lake_location = str(iceberg_table(spark, lake).location())
    copied = data_files(spark, lake)
    assert len(copied) == len(stream_files) == 3
    assert all(path.startswith(lake_location) and path.rsplit("/", 1)[1].startswith("tierlake_")
               for path, _ in copied), copied
    assert sorted(n for _, n in copied) == sorted(n for _, n in stream_files)
    assert not {p for p, _ in copied} & {p for p, _ in stream_files}  # copies, never the stream's own files
    summary = {str(k): str(v) for k, v in dict(iceberg_table(spark, lake).currentSnapshot().summary()).items()}
    assert summary["tiering.source-position"] == str(iceberg_table(spark, table).currentSnapshot().sequenceNumber())
    # The stream's files can go (its maintenance deletes them): the lake keeps its own.
    for path, _ in stream_files:
        Path(path.removeprefix("file:")).unlink()
    expected = [(i, float(i)) for i in range(3)]
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == expected
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {fresh}").collect()) == expected
    run(hive_cursor, f"DROP TABLE {table}")  # no later test's worker or maintenance meets its missing files


def test_a_copy_onto_a_branch_that_is_gone_writes_nothing(hive_cursor, spark):
    from tierlake.server.changelog import file_copy

    table, lake, _ = create(hive_cursor, pk=False)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0)")
    plan, chunk = pending(spark, table)
    # A fenced round whose branch a later round dropped: Iceberg would re-create it from main.
    with pytest.raises(Exception, match="branch tierlake_0_0_gone of .* is gone"):
        file_copy.append(plan.handle, chunk, "tierlake_0_0_gone", {})
    assert iceberg_table(spark, lake).snapshot("tierlake_0_0_gone") is None
    assert data_files(spark, lake) == []
    one_round(spark, table)
    assert [tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()] == [(1, 1.0)]


def test_a_lake_that_cannot_take_the_stream_files_is_written_through_spark(hive_cursor, spark):
    table, lake, _ = create(hive_cursor, pk=False)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0)")
    assert why_not_copied(spark, table) is None
    one_round(spark, table)

    spark.sql(f"ALTER TABLE {lake} WRITE ORDERED BY id")
    spark.sql(f"INSERT INTO {table} VALUES (2, 2.0)")
    assert why_not_copied(spark, table) == "the lake table has a sort order"
    assert jobs_of(spark, lambda: one_round(spark, table)) >= 1
    spark.sql(f"ALTER TABLE {lake} WRITE UNORDERED")

    # Files imported without field ids are read through the stream's name mapping, which a copy would lose.
    mapping = '[{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["v"]}]'
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('schema.name-mapping.default' = '{mapping}')")
    spark.sql(f"INSERT INTO {table} VALUES (3, 3.0)")
    assert why_not_copied(spark, table) == "the stream table reads some files by name mapping"
    assert jobs_of(spark, lambda: one_round(spark, table)) >= 1
    spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('schema.name-mapping.default')")

    # A column renamed in the lake by hand: the same field id, another name.
    spark.sql(f"ALTER TABLE {lake} RENAME COLUMN v TO by_hand")
    spark.sql(f"INSERT INTO {table} VALUES (4, 4.0)")
    assert why_not_copied(spark, table) == "the columns differ"
    assert jobs_of(spark, lambda: one_round(spark, table)) >= 1
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {lake}").collect()) == \
        [(1, None), (2, None), (3, None), (4, 4.0)]  # the renamed column carries nothing any more (see above)

    name = f"t{next(_counter)}_part"
    run(hive_cursor, f"CREATE TABLE {DB}.{name} (id BIGINT, v DOUBLE) TBLPROPERTIES ("
                     "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h', "
                     "'table.datalake.partition'='bucket(2, id)')")
    spark.sql(f"INSERT INTO {DB}.{name} VALUES (1, 1.0), (2, 2.0)")
    assert why_not_copied(spark, f"{DB}.{name}") == "the lake table is partitioned"
    assert jobs_of(spark, lambda: one_round(spark, f"{DB}.{name}")) >= 1
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {DB}_lake.{name}").collect()) == \
        [(1, 1.0), (2, 2.0)]




@pytest.fixture
def round_loads(monkeypatch):
    """The Iceberg tables a worker's round loads (``iceberg_table`` calls, by table name): in the round's
    thread, its branch opener and the re-pin thread, not inside the procedures it calls (the coordinator's
    side: in a tiering-service process they run in the server)."""
    seen: list[str] = []
    original = session.iceberg_table
    me, calling = threading.get_ident(), threading.local()

    def counted(spark, name, locking=False):
        thread = threading.current_thread()
        if not getattr(calling, "depth", 0) and (thread.ident == me or thread.name.startswith(
                ("tierlake-branch", "tierlake-fresh-repin"))):
            seen.append(("locking " if locking else "") + name.replace("`", ""))
        return original(spark, name, locking)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("tierlake.") and \
                getattr(module, "iceberg_table", None) is original:
            monkeypatch.setattr(module, "iceberg_table", counted)
    inner = LocalClient.call

    def call(self, procedure, **arguments):
        calling.depth = getattr(calling, "depth", 0) + 1
        try:
            return inner(self, procedure, **arguments)
        finally:
            calling.depth -= 1

    monkeypatch.setattr(LocalClient, "call", call)
    return seen


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_a_workers_round_with_maintenance_loads_each_table_once(server, hive_cursor, spark, round_loads, pk):
    """The worker opens the table's handle and everything below reads it: planning, the round's chunks,
    maintenance (compaction, both snapshot expiries with their re-pins, orphan files, a KV snapshot) and
    the fresh view's re-pin after the report. Before the handle, the same round loaded 26 times."""
    table, lake, fresh = create(hive_cursor, pk)
    for i in range(6):  # enough data files for both compactions
        spark.sql(f"INSERT INTO {table} VALUES ({i}, {i}.0{', NULL' if pk else ''})")
    client = LocalClient(server)
    job = f"job-loads-{next(_counter)}"
    table_id, epoch = assign(client, job, table)
    server.coordinator.maintenance.request(table_id)
    done = []
    original = table_maintenance.maintain
    with pytest.MonkeyPatch.context() as m:
        m.setattr(table_maintenance, "maintain", lambda *a, **k: done.extend(original(*a, **k)) or done)
        del round_loads[:]
        Worker(spark, client, job, server.config).tier(table_id, table, epoch)
        assert fresh_view.settle()

    kinds = {a.kind: a for a in done}
    assert {"compaction", "expire_snapshots", "orphan_files", "stream_compaction", "stream_expire_snapshots",
            "stream_orphan_files"} <= set(kinds), kinds
    assert not [a for a in done if a.error], done
    assert kinds["stream_compaction"].files_rewritten > 0, kinds["stream_compaction"]
    mine = Counter(n for n in round_loads if n in (table, lake))
    assert mine == Counter({table: 1, lake: 1}), round_loads
    # The stream once more through the catalog whose commits take metastore locks (maintenance's commits).
    assert [n for n in round_loads if n.startswith("locking ")] == [f"locking {table}"], round_loads
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {fresh}").collect()) == \
        [(i, float(i)) for i in range(6)]
