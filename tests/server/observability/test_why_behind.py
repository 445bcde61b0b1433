"""``sys.lake_tiering_health``: each reason a table is not being tiered, produced by what causes it — a job
that takes a table and goes quiet, nobody asking for the re-queued table, a round that fails, a disable.

The shared server runs no worker of its own (tests/conftest.py), heartbeat timeout 8 s: a job is called
quiet after 4 s without a heartbeat and its table re-queued after 8."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.conftest import wait_for
from tests.server.tiering.conftest import assign, run, wait_status
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.tiering.worker import Worker

pytestmark = pytest.mark.integration

COLUMNS = ["database_name", "table_name", "status", "reason", "job_id", "heartbeat_age_seconds", "next_due",
           "lag_seconds", "freshness_seconds", "overdue", "pending_rows", "last_error"]


def health(cur, db: str) -> dict[str, dict]:
    rows = run(cur, "SELECT * FROM sys.lake_tiering_health WHERE database_name = %(db)s", {"db": db})
    assert [d[0] for d in cur.description] == COLUMNS
    return {r[1]: dict(zip(COLUMNS, r, strict=True)) for r in rows}


def reason_of(cur, db: str, table: str, pattern: str):
    """Polls the view until ``table``'s reason matches ``pattern``; its row."""
    def matching():
        row = health(cur, db).get(table)
        return row if row is not None and re.match(pattern, row["reason"] or "") else None
    return matching


def direct(server, db: str, table: str) -> dict:
    """The view's row of one table, read by the server's own Spark (faster than a round trip through the
    gateway, for the few seconds a job counts as quiet)."""
    (row,) = server.spark.sql("SELECT * FROM sys.lake_tiering_health WHERE database_name = :db AND table_name = :t",
                              args={"db": db, "t": table}).collect()
    return row.asDict()


def quiet_or_gone(server, db: str, ghost: str) -> dict | None:
    row = direct(server, db, "quiet")
    if row["status"] != "Tiering" or row["reason"].startswith(f"owned by job {ghost} with no heartbeat"):
        return row
    assert row["reason"] == f"being tiered by job {ghost}", row  # the only other reason while it holds the table
    return None


def test_quiet_job_waiting_failed_and_disabled(server, hive_cursor):
    db = "why_" + uuid.uuid4().hex[:6]
    cur = hive_cursor
    client = LocalClient(server)
    run(cur, f"CREATE DATABASE {db}")
    run(cur, f"CREATE TABLE {db}.quiet (id BIGINT, v STRING) TBLPROPERTIES ("
             "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(cur, f"INSERT INTO {db}.quiet VALUES (1, 'a')")

    # A job takes the table and never sends another heartbeat (a tiering service that hung). It is called
    # quiet between 4 s and the 8 s timeout; a busy machine may answer slower than that window, so a
    # job that was not seen quiet is followed by another (the table comes back once re-queued).
    quiet = None
    for _attempt in range(6):
        ghost = "ghost-" + uuid.uuid4().hex[:8]
        assign(client, ghost, f"{db}.quiet")
        first = direct(server, db, "quiet")
        assert first["job_id"] == ghost or first["status"] != "Tiering"
        quiet = wait_for(lambda job=ghost: quiet_or_gone(server, db, job), 60, "the quiet job to show or time out",
                         every=0.1)
        if quiet["status"] == "Tiering":
            break
    assert quiet["status"] == "Tiering" and quiet["job_id"] == ghost and quiet["heartbeat_age_seconds"] >= 4
    assert quiet["reason"] == f"owned by job {ghost} with no heartbeat for {quiet['heartbeat_age_seconds']} s"

    # The heartbeat timeout re-queues it; no worker runs here, so it waits for one.
    server.backlog_probe.probe()
    waiting = wait_for(reason_of(cur, db, "quiet", r"waiting for a worker \(pending for \d+ s"), 60,
                       "the table to be re-queued", every=0.5)
    assert waiting["status"] == "Pending" and waiting["job_id"] is None and waiting["heartbeat_age_seconds"] is None
    assert f"tiering job {ghost} sent no heartbeat" in waiting["last_error"]
    assert waiting["pending_rows"] == 1 and waiting["freshness_seconds"] == 1

    # Disabled: it shows once, with nothing left of its state.
    run(cur, f"CALL sys.disable_tiering('{db}.quiet')")
    disabled = health(cur, db)["quiet"]
    assert disabled["status"] is None and re.match(r"disabled: sys.disable_tiering at \d{4}-", disabled["reason"])

    # A round that fails: a change type no writer through the gateway could send, tiered by a real round.
    run(cur, f"CREATE TABLE {db}.bad (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
             "'primary-key'='id', 'bucket.num'='1', 'table.datalake.freshness'='1 s')")
    server.spark.sql(f"INSERT INTO {db}.bad (id, v, _change_type) VALUES (1, 'x', '+X')")
    job = "doer-" + uuid.uuid4().hex[:8]
    table_id, epoch = assign(client, job, f"{db}.bad")
    Worker(server.spark, client, job, server.config).tier(table_id, f"{db}.bad", epoch)
    state = wait_status(server, f"{db}.bad", "Failed")
    failed = health(cur, db)["bad"]
    assert failed["status"] == "Failed" and failed["reason"].startswith("failed: ")
    assert state.last_error in failed["reason"] and "+X" in failed["reason"]
    assert "(failure 1 in a row; retried at " in failed["reason"] and failed["next_due"] is not None
    run(cur, f"CALL sys.disable_tiering('{db}.bad')")
