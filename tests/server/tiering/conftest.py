"""Fixtures for tiering tests: background workers, waiting for rounds."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conftest import running_workers
from tierlake.server.catalog import properties as P
from tierlake.server.catalog.table_path import TablePath, parse_table_path
from tierlake.server.changelog.handle import Assignment, TableHandle
from tierlake.server.runtime.session import iceberg_table


@pytest.fixture(scope="module")
def workers(server):
    """One tiering worker thread on the shared server for this module."""
    yield from running_workers(server, 1)


@pytest.fixture
def db(spark):
    name = "tl_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE `{name}`")
    return name


def handle(spark, table: str, chunk_rows: int | None = None, **assignment) -> TableHandle:
    """The handle a worker opens for ``table`` (its lake ``<db>_lake.<t>``); ``chunk_rows``: rows per lake
    commit instead of the table's."""
    stream = parse_table_path(table)
    overrides = {} if chunk_rows is None else {P.CHUNK_ROWS: chunk_rows}
    lake = TablePath(f"{stream.database}_lake", stream.table)
    return TableHandle(spark, stream, lake, assignment=Assignment(**assignment)).with_settings(overrides)


def stream_position(spark, table: str) -> int:
    """The newest stream commit a round has to tier: compactions (``replace``) after it carry no rows, and a
    round does not move the tiered position onto them."""
    stream = iceberg_table(spark, table)
    snapshot = stream.currentSnapshot()
    while snapshot is not None and str(snapshot.operation()) == "replace":
        snapshot = None if snapshot.parentId() is None else stream.snapshot(snapshot.parentId())
    return 0 if snapshot is None else int(snapshot.sequenceNumber())


def coordinator_state(server, table: str):
    _, states = server.coordinator.load()
    return next(s for s in states.values() if s.path == table)


def wait_tiered(server, table: str, timeout: float = 120.0):
    """Until the coordinator's tiered position reaches the stream's end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = coordinator_state(server, table)
        if state.status.value == "Failed":
            raise AssertionError(f"{table} failed: {state.last_error}")
        if (state.tiered_position or 0) >= stream_position(server.spark, table) and state.status.value != "Tiering":
            return state
        time.sleep(0.3)
    raise AssertionError(f"{table} not tiered in {timeout}s: {coordinator_state(server, table)}")


def wait_status(server, table: str, status: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = coordinator_state(server, table)
        if state.status.value == status:
            return state
        time.sleep(0.3)
    raise AssertionError(f"{table} never became {status}: {coordinator_state(server, table)}")


def lake_summary(spark, lake: str) -> dict:
    snapshot = iceberg_table(spark, lake).currentSnapshot()
    return {} if snapshot is None else {str(k): str(v) for k, v in dict(snapshot.summary()).items()}


def make_due(server, table: str) -> None:
    """Once the table rests in Scheduled (after its first round), make it due now."""
    wait_status(server, table, "Scheduled")

    def due_now(states, now):
        state = next(s for s in states.values() if s.path == table)
        if state.status.value != "Scheduled":
            return False, False, []
        state.next_due = now
        return True, True, []

    deadline = time.monotonic() + 60
    while not server.coordinator.mutate(due_now):
        assert time.monotonic() < deadline, f"{table} never rested in Scheduled"
        time.sleep(0.3)


def assign(client, job, path, timeout=60):
    """Heartbeat as ``job`` until ``path`` is assigned to it; another table it
    is given meanwhile is handed back as failed (it is not this test's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for kind, table_id, assigned_path, epoch, _ in client.call("heartbeat", job_id=job, request_table=True):
            if kind == "assigned":
                if assigned_path == path:
                    return table_id, epoch
                client.call(
                    "heartbeat",
                    job_id=job,
                    failed_tables=[
                        {"table_id": table_id, "tiering_epoch": epoch, "error_message": "not this test's table"}
                    ],
                )
        time.sleep(0.3)
    raise AssertionError(f"{path} was not assigned to {job}")


def run(cursor, statement, params=None):
    """Execute; the rows of a statement that returns any (DDL answers a bare "Result")."""
    cursor.execute(statement, params)
    if cursor.description and [d[0] for d in cursor.description] != ["Result"]:
        return cursor.fetchall()
    return None
