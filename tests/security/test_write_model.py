"""The write model (issue 51, reproduction 1): writers append to stream
tables through INSERT and its ingest checks, and do nothing else to tiered
tables — decided on Spark's resolved plan. MERGE (insert-only too), UPDATE,
DELETE and INSERT OVERWRITE of a stream table, and any write into a lake
table, are refused with a clear error at the statement; the table goes on
tiering and its lake stays equal to its stream."""

from __future__ import annotations

import uuid

import pytest
from pyhive import exc, hive

from tests.conftest import running_workers
from tests.security.conftest import PASSWORD
from tests.server.tiering.conftest import make_due, wait_tiered


@pytest.fixture(scope="module")
def workers(server):
    yield from running_workers(server, 1)


@pytest.fixture(scope="module")
def gateway(auth_gateway):
    return auth_gateway  # a password gateway with the server's own handlers, the ingest path among them


def _cursor(gateway, user):
    return hive.connect("127.0.0.1", gateway.port, username=user, password=PASSWORD[user], auth="CUSTOM").cursor()


def _refusal(cursor, statement) -> str:
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    return f"{status.sqlState}: {status.errorMessage}"


@pytest.mark.parametrize("kind", ["log", "pk"])
def test_writers_cannot_stop_or_falsify_tiering(server, gateway, workers, kind):
    db = "wm_" + uuid.uuid4().hex[:8]
    admin, writer = _cursor(gateway, "ann"), _cursor(gateway, "will")
    admin.execute(f"CREATE DATABASE {db}")
    key = ", 'primary-key'='id', 'bucket.num'='2'" if kind == "pk" else ""
    admin.execute(f"CREATE TABLE {db}.t (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
                  f"'table.datalake.freshness'='1 s'{key})")
    change = ", _change_type" if kind == "pk" else ""
    plus = ", '+I'" if kind == "pk" else ""
    writer.execute(f"INSERT INTO {db}.t (id, v{change}) VALUES (1, 'a'{plus}), (2, 'b'{plus})")
    writer.execute(f"INSERT INTO {db}.t (id, v{change}) SELECT 3, 'c'{plus}")
    table = f"spark_catalog.{db}.t"
    lake = f"spark_catalog.{db}_lake.t"
    wait_tiered(server, f"{db}.t")

    # An insert-only MERGE skipped the ingest checks: a change type with a newline failed every round.
    forged = ", '+I\\n' AS _change_type" if kind == "pk" else ""
    stream_refusal = f"of the stream table {table} (writers append to stream tables with INSERT INTO"
    for statement, verb in [
        (f"DELETE FROM {db}.t WHERE id = 1", ""),
        (f"UPDATE {db}.t SET v = 'x' WHERE id = 2", ""),
        (f"INSERT OVERWRITE {db}.t SELECT * FROM {db}.t", "INSERT OVERWRITE"),
        (f"MERGE INTO {db}.t s USING (SELECT 9 AS id, 'z' AS v{forged}) u ON false WHEN NOT MATCHED THEN INSERT *",
         "MERGE … WHEN NOT MATCHED THEN INSERT"),
    ]:
        message = _refusal(writer, statement)
        assert message.startswith("42501: permission denied: "), message  # one line, the gateway's code
        assert stream_refusal in message and verb in message, message
        assert "needs the admin role (decided on Spark's resolved plan)" in message, message
    for statement in (f"INSERT INTO {db}_lake.t VALUES (7, 'forged')", f"DELETE FROM {db}_lake.t WHERE id = 1"):
        message = _refusal(writer, statement)
        assert f"a write into the lake table {lake} (lake tables are written by tiering only)" in message, message

    # Nothing of it landed, and tiering goes on: a new write reaches the lake, equal to the stream.
    writer.execute(f"INSERT INTO {db}.t (id, v{change}) VALUES (4, 'd'{plus})")
    make_due(server, f"{db}.t")
    state = wait_tiered(server, f"{db}.t")
    assert state.status.value != "Failed" and state.last_error is None
    admin.execute(f"SELECT id, v FROM {db}_lake.t ORDER BY id")
    assert admin.fetchall() == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    admin.execute(f"SELECT count(*) FROM {db}.t")
    assert admin.fetchall() == [(4,)]
