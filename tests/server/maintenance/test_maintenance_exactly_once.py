"""Exactly-once through the maintenance a user can run (issue 14; docs/design.md, 'Log positions'):
Iceberg's own compaction, manifest rewrites and expiry on the lake and the
stream table, a user DELETE on the stream, a stream table dropped and created
again. Rounds are driven one at a time (no background workers): small tables,
few rounds."""

from __future__ import annotations

import re

import pytest

from tests.server.tiering.conftest import assign, coordinator_state, lake_summary, make_due, run
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.maintenance import tables as table_maintenance
from tierlake.server.runtime import iceberg_actions as im
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.tiering.worker import Worker

pytestmark = pytest.mark.integration

EXPIRE_ALL = "older_than => TIMESTAMP '2030-01-01 00:00:00', retain_last => 1"


def make_table(cursor, db, name, pk: bool, extra="", buckets=2):
    key = f", 'primary-key'='id', 'bucket.num'='{buckets}'" if pk else ""
    run(cursor, f"CREATE TABLE {db}.{name} (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
                f"'table.datalake.freshness'='1 h'{key}{extra})")


def write(cursor, path, model, changes, pk: bool):
    """One stream commit of (id, v, change_type); ``model``: the lake the stream should give."""
    if pk:
        run(cursor, f"INSERT INTO {path} (id, v, _change_type) VALUES " + ", ".join(
            f"({k}, {'NULL' if v is None else repr(v)}, {'NULL' if c is None else repr(c)})" for k, v, c in changes))
        for k, v, c in changes:
            if c == "-D":
                model.pop(k, None)
            else:
                model[k] = v
    else:
        run(cursor, f"INSERT INTO {path} (id, v) VALUES " + ", ".join(
            f"({k}, {'NULL' if v is None else repr(v)})" for k, v, _ in changes))
        model.extend((k, v) for k, v, _ in changes)


def lake_rows(cursor, lake, pk: bool):
    rows = run(cursor, f"SELECT id, v FROM {lake}")
    if pk:
        assert len(rows) == len({r[0] for r in rows}), f"duplicate keys in {lake}: {sorted(rows)}"
        return {r[0]: r[1] for r in rows}
    return sorted(rows, key=repr)


def expected(model, pk: bool):
    return dict(model) if pk else sorted(model, key=repr)


def tier(server, path, hook=None, job="job-mx"):
    """One round of ``path`` by a worker of our own; the table's state after it."""
    client = LocalClient(server)
    worker = Worker(server.spark, client, job, server.config)
    worker.hook = hook
    table_id, epoch = assign(client, job, path)
    worker.tier(table_id, path, epoch)
    return coordinator_state(server, path)


def tier_ok(server, path, hook=None):
    state = tier(server, path, hook)
    assert state.last_error is None, state.last_error
    return state


def next_round(server, path, hook=None):
    make_due(server, path)
    return tier_ok(server, path, hook)


class Once:
    """A worker hook that runs ``action`` the ``nth`` time a round reaches ``step``."""

    def __init__(self, step, action, nth=1):
        self.step, self.action, self.nth, self.seen, self.ran = step, action, nth, 0, False

    def __call__(self, name):
        if name == self.step:
            self.seen += 1
            if self.seen == self.nth:
                self.action()
                self.ran = True


def both(*hooks):
    def call(name):
        for hook in hooks:
            hook(name)
    return call


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_compaction_and_expiry_of_the_lake_add_exactly_the_new_rows(server, spark, hive_cursor, db, pk):
    """Issue 14's duplicate scenario: after rewrite_data_files + expire_snapshots(retain_last => 1) on the lake
    table no tiering summary is left in its history; the next rounds still add exactly the new rows."""
    name, model = "t", ({} if pk else [])
    path, lake = f"{db}.{name}", f"{db}_lake.{name}"
    make_table(hive_cursor, db, name, pk)
    write(hive_cursor, path, model, [(1, "a", "+I"), (2, "b", "+I")], pk)
    write(hive_cursor, path, model, [(3, "c", "+I"), (4, "d", "+I")], pk)
    tier_ok(server, path)
    if pk:  # a key deleted in the lake: a round from position 0 would bring it back
        write(hive_cursor, path, model, [(2, None, "-D"), (1, "a2", "+U")], pk)
        next_round(server, path)
    run(hive_cursor, f"CALL spark_catalog.system.rewrite_data_files(table => '{lake}', "
                     "options => map('min-input-files', '1', 'rewrite-all', 'true'))")
    run(hive_cursor, f"CALL spark_catalog.system.expire_snapshots(table => '{lake}', {EXPIRE_ALL})")
    head = iceberg_table(spark, lake).currentSnapshot()
    assert str(head.operation()) == "replace" and "tiering.source-position" not in lake_summary(spark, lake)
    assert iceberg_table(spark, lake).snapshot(head.parentId()) is None  # the history before it is gone

    write(hive_cursor, path, model, [(5, "e", "+I")], pk)
    next_round(server, path)
    write(hive_cursor, path, model, [(6, "f", "+I")], pk)
    state = next_round(server, path)
    assert lake_rows(hive_cursor, lake, pk) == expected(model, pk)
    assert state.tiered_position == int(iceberg_table(spark, path).currentSnapshot().sequenceNumber())

    if not pk:
        # A lake table whose position was never recorded (written before it was) and whose history is gone:
        # an error naming it, never position 0.
        run(hive_cursor, f"CALL spark_catalog.system.rewrite_data_files(table => '{lake}', "
                         "options => map('min-input-files', '1', 'rewrite-all', 'true'))")
        run(hive_cursor, f"CALL spark_catalog.system.expire_snapshots(table => '{lake}', {EXPIRE_ALL})")
        run(hive_cursor, f"ALTER TABLE {lake} UNSET TBLPROPERTIES ('tierlake.lake.tiered-position')")
        write(hive_cursor, path, model, [(7, "g", "+I")], pk)
        make_due(server, path)
        state = tier(server, path)
        assert state.status.value == "Failed"
        assert f"the lake table {lake} does not say which stream position it covers" in state.last_error
        assert "would add every stream row again" in state.last_error
        assert lake_rows(hive_cursor, lake, pk) == expected(model[:-1], pk)  # nothing added


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_stream_compaction_and_manifest_rewrites_lose_and_duplicate_nothing(server, spark, hive_cursor, db, pk):
    """rewrite_data_files and rewrite_manifests on the stream table: before a round (inside its range),
    during a round's write and between its chunks (one commit per chunk)."""
    name, model = "s", ({} if pk else [])
    path, lake = f"{db}.{name}", f"{db}_lake.{name}"
    make_table(hive_cursor, db, name, pk, ", 'table.datalake.tiering.chunk-rows'='2'")

    def compact():
        spark.sql(f"CALL spark_catalog.system.rewrite_data_files(table => '{path}', "
                  "options => map('min-input-files', '1', 'rewrite-all', 'true'))")
        spark.sql(f"CALL spark_catalog.system.rewrite_manifests('{path}')")

    # Round 1: the appends' files were compacted into one before the round (a replace inside its range);
    # a key changed in each commit, so only the commits' own order gives the right row.
    write(hive_cursor, path, model, [(1, "a", "+I"), (2, "b", "+I")], pk)
    write(hive_cursor, path, model, [(1, "a2", "+U"), (3, "c", "+I")], pk)
    write(hive_cursor, path, model, [(2, None, "-D"), (4, "d", "+I")], pk)
    compact()
    assert str(iceberg_table(spark, path).currentSnapshot().operation()) == "replace"
    tier_ok(server, path)
    assert lake_rows(hive_cursor, lake, pk) == expected(model, pk)

    # Round 2: compaction while the first chunk is written, and again between the first and second chunk.
    write(hive_cursor, path, model, [(5, "e", "+I"), (1, "a3", "+U")], pk)
    write(hive_cursor, path, model, [(6, "f", "+I"), (3, None, "-D")], pk)
    write(hive_cursor, path, model, [(7, "g", "+I"), (5, "e2", "+U")], pk)
    during, between = Once("during-write", compact), Once("after-lake-commit", compact)
    next_round(server, path, both(during, between))
    assert during.ran and between.ran
    assert lake_rows(hive_cursor, lake, pk) == expected(model, pk)

    # Round 3: the compactions' replace commits lie between the tiered position and a new append: only the
    # append is tiered.
    write(hive_cursor, path, model, [(8, "h", "+I")], pk)
    next_round(server, path)
    assert lake_rows(hive_cursor, lake, pk) == expected(model, pk)
    rounds = run(hive_cursor, "SELECT sum(rows) FROM sys.tiering_rounds WHERE table_id = %(id)s",
                 {"id": coordinator_state(server, path).table_id})
    assert rounds[0][0] == 13  # every stream row read once: 3 + 3 rounds of 2, and 1


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_managed_stream_compaction_loses_and_duplicates_nothing(server, spark, hive_cursor, db, pk):
    """The service's own stream compaction (table_maintenance): small files of tiered and of not yet tiered
    commits bin-packed into one replace commit; the next rounds tier exactly the commits after the position."""
    name, model = "mc", ({} if pk else [])
    path, lake = f"{db}.{name}", f"{db}_lake.{name}"
    make_table(hive_cursor, db, name, pk, buckets=1)
    stream = TablePath(db, name)
    write(hive_cursor, path, model, [(1, "a", "+I"), (2, "b", "+I")], pk)
    write(hive_cursor, path, model, [(3, "c", "+I")], pk)
    tier_ok(server, path)
    # Not yet tiered: a key changed in three commits, whose order only the commits give.
    write(hive_cursor, path, model, [(1, "a2", "+U"), (4, "d", "+I")], pk)
    write(hive_cursor, path, model, [(1, "a3", "+U"), (2, None, "-D")], pk)
    write(hive_cursor, path, model, [(1, "a4", "+U"), (5, "e", "+I")], pk)
    files_before = im.data_file_counts(iceberg_table(spark, path))[0]
    assert files_before >= table_maintenance.COMPACT_MIN_FILES

    action = table_maintenance.Action("stream_compaction", path, started_ms=0, duration_ms=0)
    table_maintenance.compact_stream(TableHandle(spark, stream, TablePath(f"{db}_lake", name)), action)
    head = iceberg_table(spark, path).currentSnapshot()
    assert str(head.operation()) == "replace"
    assert dict(head.summary())["tierlake.maintenance"] == "compaction"
    assert action.files_rewritten == files_before and im.data_file_counts(iceberg_table(spark, path))[0] == 1
    assert action.detail == f"data files {files_before} -> 1"

    next_round(server, path)
    assert lake_rows(hive_cursor, lake, pk) == expected(model, pk)
    write(hive_cursor, path, model, [(6, "f", "+I"), (1, "a5", "+U")], pk)
    state = next_round(server, path)
    assert lake_rows(hive_cursor, lake, pk) == expected(model, pk)
    assert state.tiered_position == int(iceberg_table(spark, path).currentSnapshot().sequenceNumber())
    rounds = run(hive_cursor, "SELECT sum(rows) FROM sys.tiering_rounds WHERE table_id = %(id)s",
                 {"id": state.table_id})
    assert rounds[0][0] == 11  # every stream row read once: 3, 6 and 2

    # Below the threshold (the compacted file and one append) the stream is left alone.
    action = table_maintenance.Action("stream_compaction", path, started_ms=0, duration_ms=0)
    table_maintenance.compact_stream(TableHandle(spark, stream, TablePath(f"{db}_lake", name)), action)
    assert action.detail.startswith("skipped: ") and not action.files_rewritten


def calls_in(error: str) -> list[str]:
    """The CALL statements an error message tells the user to run, in order."""
    return re.findall(r"CALL sys\.\w+\('[^)]*\)", error)


def test_a_user_delete_on_the_stream_fails_with_advice_that_loses_nothing(server, spark, hive_cursor, db):
    """A primary-key stream: tiered, an append, a user DELETE, more appends (one changes a key again).
    The error's advice takes the DELETE out and keeps every append, in order."""
    name, model = "d", {}
    path, lake = f"{db}.{name}", f"{db}_lake.{name}"
    make_table(hive_cursor, db, name, True)
    write(hive_cursor, path, model, [(1, "a", "+I"), (2, "b", "+I")], True)
    tier_ok(server, path)
    write(hive_cursor, path, model, [(3, "c", "+I")], True)
    run(hive_cursor, f"DELETE FROM {path} WHERE id = 2")
    delete = iceberg_table(spark, path).currentSnapshot()
    write(hive_cursor, path, model, [(1, "a2", "+U"), (4, "d", "+I")], True)
    write(hive_cursor, path, model, [(1, "a3", "+U")], True)
    make_due(server, path)
    state = tier(server, path)
    assert state.status.value == "Failed"
    error = state.last_error
    assert f"snapshot {delete.snapshotId()} (operation '{delete.operation()}'" in error
    assert "without losing any append (2 committed after it)" in error
    assert f"rollback_to_snapshot('{path}', {delete.parentId()})" in error  # and by hand
    assert lake_rows(hive_cursor, lake, True) == {1: "a", 2: "b"}

    steps = calls_in(error)
    assert steps == [f"CALL sys.drop_stream_commit('{path}', {delete.snapshotId()})",
                     f"CALL sys.retry_tiering('{path}')"]
    reapplied = run(hive_cursor, steps[0])
    assert [r[2] for r in reapplied] == ["taken out", "re-applied", "re-applied"]
    try:
        run(hive_cursor, steps[1])
    except Exception:  # noqa: BLE001 - the back-off may have retried it first
        pass
    tier_ok(server, path)
    assert lake_rows(hive_cursor, lake, True) == model == {1: "a3", 2: "b", 3: "c", 4: "d"}
    assert run(hive_cursor, f"SELECT count(*) FROM {path}")[0][0] == 6  # the stream kept every appended row


def test_a_stream_table_dropped_and_created_again_is_recognised(server, spark, hive_cursor, db):
    """Same name, new table (a new Iceberg UUID), shorter history than the old one's tiered position:
    a clear error, and following it every row of the new table reaches a new lake table."""
    name, old, new = "r", [], []
    path, lake = f"{db}.{name}", f"{db}_lake.{name}"
    make_table(hive_cursor, db, name, False)
    for k in (1, 2, 3):
        write(hive_cursor, path, old, [(k, "old", None)], False)
    tier_ok(server, path)
    old_uuid = str(iceberg_table(spark, path).uuid())
    # Dropped by another application: the registration stays (the gateway's DROP TABLE unregisters the
    # table in the same step, tests/server/tiering/test_fresh_views.py).
    spark.sql(f"DROP TABLE {path}")
    # ... and created again there too (through the gateway, a tiered CREATE over the old lake table is
    # refused before anything is made: tests/server/tiering/test_leftover_lake.py).
    spark.sql(f"CREATE TABLE {path} (id BIGINT, v STRING) USING iceberg "
              "TBLPROPERTIES ('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
    new_uuid = str(iceberg_table(spark, path).uuid())
    assert new_uuid != old_uuid
    for k in (10, 11, 12, 13):  # 4 commits: the old position (3) alone would skip the first three
        write(hive_cursor, path, new, [(k, "new", None)], False)
    make_due(server, path)
    state = tier(server, path)
    assert state.status.value == "Failed"
    assert f"the stream table {path} was dropped and created again" in state.last_error
    assert new_uuid in state.last_error and old_uuid in state.last_error
    assert lake_rows(hive_cursor, lake, False) == sorted(old, key=repr)  # nothing of the new table in the old lake

    run(hive_cursor, f"CALL sys.disable_tiering('{path}')")
    run(hive_cursor, f"DROP TABLE {lake}")
    run(hive_cursor, f"CALL sys.enable_tiering('{path}')")
    tier_ok(server, path)
    assert lake_rows(hive_cursor, lake, False) == sorted(new, key=repr)
