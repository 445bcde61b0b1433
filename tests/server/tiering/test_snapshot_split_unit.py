"""Snapshot splits and the job's leases without a JVM: planning order and the
compatibility rule (an old server's "unsupported" is a warning)."""

from __future__ import annotations

import logging

import pytest

from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.planner import Plan, StreamCommit
from tierlake.server.exceptions import InvalidArgumentError, UnknownProcedureError, UnsupportedFeatureError
from tierlake.server.tiering.snapshot_split import JobLeases, SnapshotSplit

SPLIT = SnapshotSplit("sys.kv_t_1", snapshot_id=77, log_position=5, stream_snapshot_id=500, buckets=3)


def commit(seq, rows=1):
    return StreamCommit(seq, 1000 + seq, "append", {"added-records": str(rows)}, 0)


def test_the_snapshot_split_is_read_first_then_the_log_from_its_position():
    handle = TableHandle.loaded(None, TablePath("d", "t"), TablePath("d_lake", "t"), spec=TieredSpec(["id"]))
    plan = Plan(handle, lake_position=5,
                lake_snapshot_id=None, end_position=7, commits=[commit(6), commit(7)], start_snapshot_id=500)
    plan.snapshot_split = SPLIT
    chunks = plan.chunks(max_rows=1)
    assert not plan.empty
    assert [(c.snapshot, c.start_position, c.end_position) for c in chunks] == [
        (SPLIT, 5, 5),
        (None, 5, 6),
        (None, 6, 7),
    ]
    assert chunks[0].end_snapshot_id == 500 and chunks[1].start_snapshot_id == 500
    only_split = Plan(handle, 5, None, 5, [], 500)
    only_split.snapshot_split = SPLIT
    assert not only_split.empty and [c.snapshot for c in only_split.chunks(10)] == [SPLIT]


class FakeClient:
    def __init__(self, error=None, rows=None):
        self.error, self.rows, self.calls = error, rows, []

    def call(self, procedure, **arguments):
        self.calls.append((procedure, arguments))
        if self.error is not None:
            raise self.error
        return self.rows or []


@pytest.mark.parametrize(
    "error",
    [
        UnsupportedFeatureError("KV snapshot leases are unsupported by this server: ..."),
        UnknownProcedureError("unknown procedure sys.acquire_lease; SELECT * FROM sys.procedures lists them"),
        # Over JDBC the error is PyHive's, with the server's SQLSTATE in its text.
        RuntimeError("OperationalError(TExecuteStatementResp(status=TStatus(statusCode=3, sqlState='0A000', ...)))"),
    ],
)
def test_an_old_server_is_a_warning_and_the_round_goes_on(error, caplog):
    client = FakeClient(error)
    leases = JobLeases(client, "job-1")
    with caplog.at_level(logging.WARNING, logger="tierlake.tiering"):
        assert leases.acquire("d.t", SPLIT) is True
    assert "does not support KV snapshot leases" in caplog.text
    leases.release("d.t")
    leases.drop_stale()
    assert [c[0] for c in client.calls] == ["acquire_lease"]  # asked once, then not again


def test_other_errors_are_not_hidden():
    leases = JobLeases(FakeClient(InvalidArgumentError("bucket 7 does not exist")), "job-1")
    with pytest.raises(InvalidArgumentError):
        leases.acquire("d.t", SPLIT)


def test_the_job_id_is_the_lease_id_and_every_bucket_is_leased():
    client = FakeClient(rows=[("d.t", b, 77, "acquired", None) for b in range(3)])
    leases = JobLeases(client, "job-9")
    assert leases.acquire("d.t", SPLIT) is True
    leases.release("d.t")
    leases.release("d.t")  # once only
    (acquire, args), (release, rargs) = client.calls
    assert (acquire, args["lease_id"], dict(args["snapshots"])) == ("acquire_lease", "job-9", {0: 77, 1: 77, 2: 77})
    assert (release, rargs) == ("release_lease", {"lease_id": "job-9", "table": "d.t"})
    assert JobLeases(FakeClient(rows=[("d.t", 0, 77, "unavailable", None)]), "j").acquire("d.t", SPLIT) is False
