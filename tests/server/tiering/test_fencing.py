"""Epochs fence the lake commit: a worker that lost its table cannot commit."""

from __future__ import annotations

import threading

import pytest

from tests.server.tiering.conftest import assign, coordinator_state, lake_summary, wait_status
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.changelog import planner
from tierlake.server.changelog.handle import Assignment, TableHandle
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.exceptions import FencedEpochError
from tierlake.server.tiering.round import run_round
from tierlake.server.tiering.worker import Worker

pytestmark = pytest.mark.integration


def make_table(cursor, db, name):
    cursor.execute(f"CREATE TABLE {db}.{name} (id BIGINT) TBLPROPERTIES "
                   "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
    cursor.fetchall()
    cursor.execute(f"INSERT INTO {db}.{name} VALUES (1), (2), (3)")


class Pause:
    """A worker hook that stops at one step until released."""

    def __init__(self, step):
        self.step, self.reached, self.release = step, threading.Event(), threading.Event()

    def __call__(self, name):
        if name == self.step:
            self.reached.set()
            assert self.release.wait(300)


def test_a_paused_worker_whose_table_was_reassigned_cannot_commit(server, spark, hive_cursor, db):
    make_table(hive_cursor, db, "f1")
    path = f"{db}.f1"
    client = LocalClient(server)
    paused = Worker(spark, client, "job-paused", server.config)
    paused.renew_interval = 3600  # looks dead to the coordinator, like a long GC pause
    paused.hook = Pause("before-commit")
    table_id, epoch = assign(client, "job-paused", path)
    thread = threading.Thread(target=paused.tier, args=(table_id, path, epoch))
    thread.start()
    assert paused.hook.reached.wait(120), "the paused worker never got to its commit"

    # The heartbeat timeout (8 s in tests) re-queues the table with a new epoch.
    state = wait_status(server, path, "Pending", timeout=60)
    assert state.tiering_epoch == epoch + 1 and "job-paused sent no heartbeat" in state.last_error
    other = Worker(spark, client, "job-other", server.config)
    new_id, new_epoch = assign(client, "job-other", path)
    other.tier(new_id, path, new_epoch)

    paused.hook.release.set()
    thread.join(timeout=120)
    hive_cursor.execute(f"SELECT id FROM {db}_lake.f1 ORDER BY id")
    assert [r[0] for r in hive_cursor.fetchall()] == [1, 2, 3]  # exactly once
    summary = lake_summary(spark, f"{db}_lake.f1")
    assert summary["tiering.epoch"] == str(new_epoch) and summary["tiering.job-id"] == "job-other"
    assert coordinator_state(server, path).tiered_position == int(summary["tiering.source-position"])


def test_the_lake_commit_itself_is_a_compare_and_set(server, spark, hive_cursor, db):
    """Even a worker that skips the epoch check cannot commit over a newer round."""
    make_table(hive_cursor, db, "f2")
    path = f"{db}.f2"
    stream, lake = parse_table_path(path), parse_table_path(f"{db}_lake.f2")
    stale = TableHandle.loaded(spark, stream, lake, spec=TieredSpec())
    stale.assignment = Assignment(job_id="job-stale")
    stale_plan = planner.plan_round(stale)
    client = LocalClient(server)
    table_id, epoch = assign(client, "job-now", path)
    Worker(spark, client, "job-now", server.config).tier(table_id, path, epoch)
    stale.assignment = Assignment(table_id, epoch - 1, "job-stale")
    with pytest.raises(FencedEpochError, match="another worker committed first"):
        run_round(stale_plan, check_epoch=lambda: None)
    hive_cursor.execute(f"SELECT id FROM {db}_lake.f2 ORDER BY id")
    assert [r[0] for r in hive_cursor.fetchall()] == [1, 2, 3]


def test_disabling_a_table_mid_round_ends_the_round_cleanly(server, spark, hive_cursor, db):
    make_table(hive_cursor, db, "f3")
    path = f"{db}.f3"
    client = LocalClient(server)
    worker = Worker(spark, client, "job-d", server.config)
    worker.hook = Pause("before-commit")
    table_id, epoch = assign(client, "job-d", path)
    thread = threading.Thread(target=worker.tier, args=(table_id, path, epoch))
    thread.start()
    assert worker.hook.reached.wait(120)
    hive_cursor.execute(f"CALL sys.disable_tiering('{path}')")
    assert hive_cursor.fetchall()[0][2] == "Tiering"
    worker.hook.release.set()
    thread.join(timeout=120)
    assert not thread.is_alive()
    hive_cursor.execute(f"SELECT count(*) FROM {db}_lake.f3")
    assert hive_cursor.fetchall() == [(0,)]  # nothing committed after the table was disabled
    hive_cursor.execute("SELECT outcome FROM sys.tiering_rounds WHERE table_id = %(id)s", {"id": table_id})
    assert [r[0] for r in hive_cursor.fetchall()] == ["disabled"]
    branches = [str(b) for b in __import__("tierlake.server.runtime.session", fromlist=["x"]).iceberg_table(
        spark, f"{db}_lake.f3").refs().keySet()]
    assert branches == ["main"] or not any(b.startswith("tierlake_") for b in branches)
