"""KV snapshots, their retention, leases, log retention and snapshot splits,
through the real gateway and real tiering rounds."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from pyhive import exc

from tests.server.tiering.conftest import assign, coordinator_state, lake_summary, make_due, run, stream_position
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.tiering.worker import Worker, persistent_job_id

pytestmark = pytest.mark.integration


def error_of(cursor, statement):
    with pytest.raises(exc.OperationalError) as info:
        run(cursor, statement)
    return info.value.args[0].status


def make_pk_table(cursor, db, name, extra=""):
    run(cursor, f"CREATE TABLE {db}.{name} (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
                f"'primary-key'='id', 'bucket.num'='2', 'table.datalake.freshness'='1 h'{extra})")


def write(cursor, db, name, model, changes):
    """One stream commit of (id, v, change_type); ``model`` is the expected state (one change per key)."""
    run(cursor, f"INSERT INTO {db}.{name} (id, v, _change_type) VALUES "
        + ", ".join(f"({k}, {'NULL' if v is None else repr(v)}, {'NULL' if c is None else repr(c)})"
                    for k, v, c in changes))
    for k, v, c in changes:
        if c == "-D":
            model.pop(k, None)
        elif c != "-U":
            model[k] = v


def kv_snapshot(cursor, table):
    (row,) = run(cursor, f"CALL sys.kv_snapshot('{table}')")
    return row


def expire(cursor, table, retain):
    return {r[1]: r[3] for r in run(cursor, f"CALL sys.expire_kv_snapshots('{table}', retain => {retain})")}


def kv_snapshot_ids(cursor, db, name):
    return [r[0] for r in run(cursor, "SELECT snapshot_id FROM sys.kv_snapshots WHERE database_name = %(db)s "
                                      "AND table_name = %(t)s ORDER BY log_position", {"db": db, "t": name})]


def leases(cursor, db, name):
    return run(cursor, "SELECT lease_id, bucket, snapshot_id, state FROM sys.kv_snapshot_leases "
                       "WHERE database_name = %(db)s AND table_name = %(t)s ORDER BY lease_id, bucket",
               {"db": db, "t": name})


def kv_state(spark, table, snapshot_id):
    kv_table = str(iceberg_table(spark, table).properties().get("tierlake.kv-table"))
    rows = spark.read.option("snapshot-id", str(snapshot_id)).table(kv_table).collect()
    return {r["id"]: r["v"] for r in rows}, kv_table


def test_kv_snapshots_retention_and_leases(server, spark, hive_cursor, db):
    make_pk_table(hive_cursor, db, "kv")
    table = f"{db}.kv"
    run(hive_cursor, f"CALL sys.disable_tiering('{table}')")  # snapshots need no tiering
    model: dict = {}
    write(hive_cursor, db, "kv", model, [(1, "a", "+I"), (2, "b", "+I")])
    s1 = kv_snapshot(hive_cursor, table)
    assert s1[0] == table and s1[2] == stream_position(spark, table) and s1[4] is True
    assert kv_snapshot(hive_cursor, table)[1:3] == s1[1:3]  # nothing new: the same snapshot
    write(hive_cursor, db, "kv", model, [(1, "a2", "+U"), (2, None, "-D"), (3, "c", None)])
    s2 = kv_snapshot(hive_cursor, table)
    assert kv_state(spark, table, s1[1])[0] == {1: "a", 2: "b"}
    assert kv_state(spark, table, s2[1])[0] == model == {1: "a2", 3: "c"}
    assert kv_snapshot_ids(hive_cursor, db, "kv") == [s1[1], s2[1]]

    # A leased snapshot survives the automatic retention and an explicit expire.
    rows = run(hive_cursor, f"CALL sys.acquire_lease(lease_id => 'reader', table => '{table}', "
                            f"snapshots => map(0, {s1[1]}L, 1, {s1[1]}L), duration => '1 h')")
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [(table, 0, s1[1], "acquired"), (table, 1, s1[1], "acquired")]
    # The Iceberg tag behind it ends with the lease: its age counts from the snapshot's commit, not the acquire.
    from tierlake.server.kv.leases import Leases, tag_name

    _, kv_table = kv_state(spark, table, s1[1])
    expires_ms = int(
        next(r for r in Leases(spark).rows() if r["lease_id"] == "reader")["expires_at"].timestamp() * 1000
    )
    kv_iceberg = iceberg_table(spark, kv_table)
    max_age = int(kv_iceberg.refs().get(tag_name("reader", s1[1])).maxRefAgeMs())
    assert abs(max_age - (expires_ms - int(kv_iceberg.snapshot(s1[1]).timestampMillis()))) <= 1
    write(hive_cursor, db, "kv", model, [(4, "d", "+I")])
    s3 = kv_snapshot(hive_cursor, table)  # applies kv.snapshot.num-retained = 2
    rows = run(
        hive_cursor,
        "SELECT snapshot_id, leased FROM sys.kv_snapshots WHERE database_name = %(db)s ORDER BY log_position",
        {"db": db},
    )
    assert rows == [(s1[1], True), (s2[1], False), (s3[1], False)]
    assert expire(hive_cursor, table, 1) == {s1[1]: "leased", s2[1]: "expired", s3[1]: "retained"}
    # The tag holds it against an external expire_snapshots as well.
    run(
        hive_cursor,
        f"CALL spark_catalog.system.expire_snapshots(table => '{kv_table}', "
        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)",
    )
    assert kv_state(spark, table, s1[1])[0] == {1: "a", 2: "b"}

    # Acquiring an expired snapshot says so.
    rows = run(hive_cursor, f"CALL sys.acquire_lease('other', '{table}', map(0, {s2[1]}L))")
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(0, s2[1], "unavailable", None)]
    assert f"KV snapshot {s2[1]} of {table} is not retained any more" in rows[0][5]
    assert all(r[0] != "other" for r in leases(hive_cursor, db, "kv"))

    # Released: the next cleanup removes it.
    rows = run(hive_cursor, f"CALL sys.release_lease('reader', '{table}')")
    assert [(r[1], r[3]) for r in rows] == [(0, "released"), (1, "released")]
    assert expire(hive_cursor, table, 1) == {s1[1]: "expired", s3[1]: "retained"}
    assert kv_snapshot_ids(hive_cursor, db, "kv") == [s3[1]]
    assert iceberg_table(spark, kv_table).snapshot(s1[1]) is None

    # An expired lease does not block cleanup ...
    write(hive_cursor, db, "kv", model, [(5, "e", "+I")])
    s4 = kv_snapshot(hive_cursor, table)
    run(hive_cursor, f"CALL sys.acquire_lease('short', '{table}', map(0, {s3[1]}L), '1 s')")
    deadline = time.monotonic() + 30
    while leases(hive_cursor, db, "kv") != [("short", 0, s3[1], "expired")]:
        assert time.monotonic() < deadline, leases(hive_cursor, db, "kv")
        time.sleep(0.3)
    assert expire(hive_cursor, table, 1) == {s3[1]: "expired", s4[1]: "retained"}
    assert leases(hive_cursor, db, "kv") == []  # expired leases are cleaned up with it

    # ... a renewed one does: every acquire renews the whole lease.
    write(hive_cursor, db, "kv", model, [(6, "f", "+I")])
    s5 = kv_snapshot(hive_cursor, table)
    first = run(hive_cursor, f"CALL sys.acquire_lease('renewed', '{table}', map(0, {s4[1]}L), '1 s')")
    renewed = run(hive_cursor, f"CALL sys.acquire_lease('renewed', '{table}', map(1, {s5[1]}L), '1 h')")
    assert renewed[0][4] > first[0][4]
    time.sleep(1.5)  # past the first acquire's expiry
    rows = run(
        hive_cursor,
        "SELECT bucket, snapshot_id, state, expires_at FROM sys.kv_snapshot_leases "
        "WHERE lease_id = 'renewed' ORDER BY bucket",
    )
    assert [r[:3] for r in rows] == [(0, s4[1], "active"), (1, s5[1], "active")] and rows[0][3] == rows[1][3]
    assert expire(hive_cursor, table, 1) == {s4[1]: "leased", s5[1]: "retained"}
    assert [r[1] for r in run(hive_cursor, "CALL sys.drop_lease('renewed')")] == [0, 1]
    assert expire(hive_cursor, table, 1) == {s4[1]: "expired", s5[1]: "retained"}
    assert kv_state(spark, table, s5[1])[0] == model

    # The periodic snapshot: due once kv.snapshot.interval (10 min) has passed since the newest.
    from tierlake.server.catalog.table_path import TablePath
    from tierlake.server.maintenance.kv_tables import maintain

    write(hive_cursor, db, "kv", model, [(7, "g", "+I")])
    now = datetime.now(timezone.utc)
    assert maintain(spark, server.config, TablePath(db, "kv"), None, now) == []
    assert maintain(spark, server.config, TablePath(db, "kv"), None, now + timedelta(minutes=10)) == ["snapshot"]
    s6 = kv_snapshot_ids(hive_cursor, db, "kv")[-1]
    assert kv_snapshot_ids(hive_cursor, db, "kv") == [s5[1], s6] and kv_state(spark, table, s6)[0] == model


def test_the_kv_table_of_a_dropped_stream_table_is_dropped_by_maintenance(server, spark, hive_cursor, db):
    from pathlib import Path
    from urllib.parse import urlparse

    from tierlake.server.maintenance.kv_tables import KvMaintenance

    make_pk_table(hive_cursor, db, "gone")
    table = f"{db}.gone"
    run(hive_cursor, f"CALL sys.disable_tiering('{table}')")
    write(hive_cursor, db, "gone", {}, [(1, "a", "+I"), (2, "b", "+I")])
    kv_snapshot(hive_cursor, table)
    _, kv_table = kv_state(spark, table, kv_snapshot_ids(hive_cursor, db, "gone")[0])
    kv_dir = Path(urlparse(str(iceberg_table(spark, kv_table).location())).path)
    assert any(kv_dir.rglob("*.parquet"))
    assert KvMaintenance(server).run_once().get(kv_table) is None  # its stream table is alive: kept

    run(hive_cursor, f"DROP TABLE {table}")  # relayed to Spark; tierlake does not see it
    assert KvMaintenance(server).run_once()[kv_table] == ["dropped orphan KV table"]
    assert not spark.catalog.tableExists(kv_table)
    assert kv_snapshot_ids(hive_cursor, db, "gone") == []
    assert not any(kv_dir.rglob("*.parquet"))


def test_bad_lease_calls_are_clear_errors(hive_cursor, db):
    make_pk_table(hive_cursor, db, "bad")
    run(hive_cursor, f"CALL sys.disable_tiering('{db}.bad')")
    status = error_of(hive_cursor, f"CALL sys.acquire_lease('x', '{db}.bad', map(7, 1L))")
    assert "bucket 7 does not exist: " in status.errorMessage and status.sqlState == "22023"
    status = error_of(hive_cursor, f"CALL sys.expire_kv_snapshots('{db}.bad', retain => 0)")
    assert "retain must be at least 1" in status.errorMessage
    run(hive_cursor, f"CREATE TABLE {db}.log (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')")
    status = error_of(hive_cursor, f"CALL sys.kv_snapshot('{db}.log')")
    assert "has no primary key" in status.errorMessage
    # Nothing retained yet: every bucket is unavailable, nothing fails silently.
    rows = run(hive_cursor, f"CALL sys.acquire_lease('x', '{db}.bad')")
    assert [(r[1], r[3]) for r in rows] == [(0, "unavailable"), (1, "unavailable")]
    assert rows[0][5].startswith(f"{db}.bad has no KV snapshot yet: CALL sys.kv_snapshot('{db}.bad') takes one now")


def test_a_server_without_leases_says_unsupported(hive_cursor, db, monkeypatch):
    from tierlake.server.kv import leases as lease_module

    make_pk_table(hive_cursor, db, "old")
    monkeypatch.setattr(lease_module, "LEASE_TABLE", "sys.no_lease_table_in_this_schema")
    status = error_of(hive_cursor, f"CALL sys.acquire_lease('job', '{db}.old')")
    assert status.sqlState == "0A000" and "KV snapshot leases are unsupported by this server" in status.errorMessage


# -- snapshot splits in tiering rounds ---------------------------------------------


def tier_once(server, worker, path):
    table_id, epoch = assign(LocalClient(server), worker.job_id, path)
    worker.tier(table_id, path, epoch)
    state = coordinator_state(server, path)
    assert state.last_error is None, state.last_error


def lake_rows(cursor, lake):
    return {r[0]: r[1] for r in run(cursor, f"SELECT id, v FROM {lake}")}


def truncated_table(server, spark, cursor, db, name, worker):
    """A primary-key table whose log was truncated by retention, and its lake table dropped and rebuilt."""
    make_pk_table(cursor, db, name, ", 'table.log.ttl'='0 s'")
    path, model = f"{db}.{name}", {}
    write(cursor, db, name, model, [(1, "a", "+I"), (2, "b", "+I"), (3, "c", "+I")])
    write(cursor, db, name, model, [(1, "a2", "+U"), (2, None, "-D")])
    tier_once(server, worker, path)
    snap = kv_snapshot(cursor, path)
    write(cursor, db, name, model, [(4, "d", None)])
    make_due(server, path)
    tier_once(server, worker, path)
    (truncation,) = run(cursor, f"CALL sys.apply_log_retention('{path}')")
    # Up to the KV snapshot, not to the tiered position (the server's own maintenance may have done it first).
    assert truncation[1] == snap[2] < stream_position(spark, path)
    assert run(cursor, f"SELECT count(*) FROM {path}")[0][0] == 1  # only the commit after the snapshot is left
    head = iceberg_table(spark, path).currentSnapshot()  # a maintenance commit, which rounds skip
    assert str(head.operation()) == "delete" and str(head.summary().get("tierlake.maintenance")) == "log-retention"
    run(cursor, f"CALL sys.disable_tiering('{path}')")
    run(cursor, f"DROP TABLE {db}_lake.{name}")
    run(cursor, f"CALL sys.enable_tiering('{path}')")
    return path, model, snap


class Pause:
    def __init__(self, step, action=None):
        self.step, self.action = step, action
        self.reached, self.release = threading.Event(), threading.Event()

    def __call__(self, name):
        if name == self.step and not self.reached.is_set():
            self.reached.set()
            if self.action is not None:
                self.action()
            assert self.release.wait(300)


def test_a_leased_snapshot_survives_expiry_while_a_rebuild_reads_it(server, spark, hive_cursor, db):
    client = LocalClient(server)
    worker = Worker(spark, client, "job-kv-race", server.config)
    path, model, snap = truncated_table(server, spark, hive_cursor, db, "race", worker)
    # The log alone cannot rebuild the lake any more; the round leases the KV
    # snapshot and pauses between planning and reading it.
    worker.hook = Pause("after-plan")
    table_id, epoch = assign(client, worker.job_id, path)
    thread = threading.Thread(target=worker.tier, args=(table_id, path, epoch))
    thread.start()
    assert worker.hook.reached.wait(120)
    try:
        assert leases(hive_cursor, db, "race") == [
            ("job-kv-race", 0, snap[1], "active"),
            ("job-kv-race", 1, snap[1], "active"),
        ]
        later = dict(model)
        write(hive_cursor, db, "race", later, [(5, "e", "+I")])
        newer = kv_snapshot(hive_cursor, path)
        assert expire(hive_cursor, path, 1) == {snap[1]: "leased", newer[1]: "retained"}
        from tierlake.server.maintenance.kv_tables import KvMaintenance

        KvMaintenance(server).run_once()  # the automatic retention, too
        assert kv_snapshot_ids(hive_cursor, db, "race") == [snap[1], newer[1]]
    finally:
        worker.hook.release.set()
        thread.join(timeout=300)
    assert coordinator_state(server, path).last_error is None
    assert lake_rows(hive_cursor, f"{db}_lake.race") == model  # the state at the round's plan
    assert leases(hive_cursor, db, "race") == []  # released when the round finished
    assert expire(hive_cursor, path, 1) == {snap[1]: "expired", newer[1]: "retained"}
    assert kv_snapshot_ids(hive_cursor, db, "race") == [newer[1]]
    make_due(server, path)
    tier_once(server, worker, path)
    assert lake_rows(hive_cursor, f"{db}_lake.race") == later == {1: "a2", 3: "c", 4: "d", 5: "e"}


class Crash(BaseException):
    """Stands for SIGKILL: no except clause of the worker runs."""


def test_a_rebuilt_lake_equals_the_stream_and_a_restarted_job_reuses_its_lease(
    server, spark, hive_cursor, db, tmp_path
):
    client = LocalClient(server)
    job_id = persistent_job_id(tmp_path, "worker-0")
    first = Worker(spark, client, job_id, server.config)
    path, model, snap = truncated_table(server, spark, hive_cursor, db, "rebuilt", first)

    def crash(name):
        if name == "after-plan":
            raise Crash()

    first.hook = crash
    table_id, epoch = assign(client, job_id, path)
    with pytest.raises(Crash):
        first.tier(table_id, path, epoch)
    assert {r[0] for r in leases(hive_cursor, db, "rebuilt")} == {job_id}  # left behind by the "killed" job

    restarted = Worker(spark, client, persistent_job_id(tmp_path, "worker-0"), server.config)
    assert restarted.job_id == job_id
    seen = []
    tier = restarted.tier

    def tier_watched(table_id, tiered_path, epoch, *session):
        # The leases are looked at in this table's rounds only: the job may be handed other tables too.
        restarted.hook = None if tiered_path != path else lambda name: (
            name == "after-plan"
            and seen.append(
                {r["lease_id"] for r in spark.table("sys.kv_snapshot_leases").where(
                    f"database_name = '{db}' AND table_name = 'rebuilt'").collect()}
            )
        )
        return tier(table_id, tiered_path, epoch, *session)

    restarted.tier = tier_watched
    restarted.start()
    try:
        # Its table times out of the crashed round and comes back to the same job.
        deadline = time.monotonic() + 120
        while not (seen and coordinator_state(server, path).status.value == "Scheduled"):
            assert time.monotonic() < deadline, coordinator_state(server, path)
            time.sleep(0.5)
    finally:
        restarted.stop()
        restarted.join(timeout=120)
    assert seen and all(s == {job_id} for s in seen)  # the same lease id, no second lease
    assert leases(hive_cursor, db, "rebuilt") == []  # no orphan lease
    assert lake_rows(hive_cursor, f"{db}_lake.rebuilt") == model == {1: "a2", 3: "c", 4: "d"}
    summary = lake_summary(spark, f"{db}_lake.rebuilt")
    assert summary["tiering.job-id"] == job_id
    assert int(summary["tiering.source-position"]) == coordinator_state(server, path).tiered_position > snap[2]
