"""Each concurrent round runs in its own Spark session (server/tiering/worker.py,
``session.private_session``): what one round sets — the bucketed MERGE's
storage-partitioned-join settings — is seen by no other round, by no client
session, and not by its own retry without them."""

from __future__ import annotations

import threading

import pytest

from tests.server.tiering.conftest import coordinator_state, run, wait_tiered
from tierlake.server.catalog import properties as P
from tierlake.server.changelog import lake_write
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.tiering import worker as worker_module
from tierlake.server.tiering.worker import Worker

pytestmark = pytest.mark.integration

KEY = "spark.sql.sources.v2.bucketing.enabled"


def test_four_rounds_at_once_never_share_settings(server, hive_cursor, db, spark, monkeypatch):
    pk, log_table = f"{db}.orders", f"{db}.clicks"
    run(hive_cursor, f"CREATE TABLE {pk} (id BIGINT, v DOUBLE) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'primary-key'='id', 'bucket.num'='2', 'table.datalake.freshness'='1 s')")
    run(hive_cursor, f"CREATE TABLE {log_table} (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'table.datalake.freshness'='1 s')")
    pk_id = str(coordinator_state(server, pk).table_id)
    merge_held, others_checked = threading.Event(), threading.Event()
    merge_tries: list[str | None] = []
    seen: dict[str, str | None] = {}
    original_commit, original_round = lake_write.with_commit_properties, worker_module.run_round

    def merge(session, properties, fn):
        if properties.get(P.TIERING_TABLE_ID) != pk_id:
            return original_commit(session, properties, fn)
        merge_tries.append(session.conf.get(KEY, None))
        if session.conf.get(KEY, None) == "true" and len(merge_tries) == 1:
            merge_held.set()  # the bucketed settings are on in this round's session right now
            assert others_checked.wait(120)
            raise RuntimeError("Can't zip RDDs with unequal numbers of partitions")  # as SPJ defects fail
        return original_commit(session, properties, fn)

    def round_(plan, *args, **kwargs):
        session = plan.handle.spark
        if str(plan.stream) == log_table and not others_checked.is_set():
            assert merge_held.wait(120)
            seen["log round"] = session.conf.get(KEY, None)
            seen["server session"] = spark.conf.get(KEY, None)
            seen["client session"] = run(hive_cursor, f"SET {KEY}")[0][1]
            others_checked.set()
        return original_round(plan, *args, **kwargs)

    monkeypatch.setattr(lake_write, "with_commit_properties", merge)
    monkeypatch.setattr(worker_module, "run_round", round_)
    job = Worker(server.spark, LocalClient(server), "job-sessions", server.config)
    job.tables_per_job = 4
    run(hive_cursor, f"INSERT INTO {pk} VALUES (1, 1.0, NULL), (2, 2.0, NULL)")
    run(hive_cursor, f"INSERT INTO {log_table} VALUES (10), (11)")
    job.start()
    try:
        wait_tiered(server, pk)
        wait_tiered(server, log_table)
    finally:
        job.stop()
        job.join(120)
    assert merge_held.is_set() and others_checked.is_set()
    assert merge_tries[:2] == ["true", None]  # the retry ran without the settings
    assert seen["log round"] != "true" and seen["server session"] != "true", seen
    assert seen["client session"] != "true", seen
    assert sorted(run(hive_cursor, f"SELECT id, v FROM {db}_lake.orders")) == [(1, 1.0), (2, 2.0)]
    assert sorted(r[0] for r in run(hive_cursor, f"SELECT id FROM {db}_lake.clicks")) == [10, 11]
    assert job.most_at_once >= 2
