"""The coordinator through the gateway: heartbeats, errors, epochs, timeouts."""

from __future__ import annotations

import threading
import uuid

import pytest
from pyhive import exc, hive
from tierlake_client.sqltext import call_statement

from tests.conftest import make_iceberg_tables
from tests.conftest import wait_for as shared_wait_for
from tierlake.server.clients.procedure_client import Admin, LocalClient
from tierlake.server.escaping import printable

pytestmark = pytest.mark.integration


def call(cursor, procedure: str, **arguments):
    cursor.execute(call_statement(procedure, arguments))
    return cursor.fetchall()


def status(cursor, database: str, table: str):
    cursor.execute(
        "SELECT * FROM sys.lake_tiering_status WHERE database_name = %(db)s AND table_name = %(t)s",
        {"db": database, "t": table},
    )
    rows = cursor.fetchall()
    return rows[0] if rows else None


def wait_for(predicate, timeout=30.0, every=0.5):
    return shared_wait_for(predicate, timeout, "the table's status", every)


@pytest.fixture
def tables(spark, hive_cursor):
    """Register N fresh tables in a fresh database; disable them afterwards."""
    made: list[str] = []

    def make(n: int) -> dict[str, int]:
        database = "coord_" + uuid.uuid4().hex[:8]
        names = [f"t{i}" for i in range(n)]
        make_iceberg_tables(spark, database, names)
        ids = {}
        for name in names:
            ((table_id, path, lake, state, created),) = call(hive_cursor, "enable_tiering", table=f"{database}.{name}")
            assert (path, lake, state, created) == (f"{database}.{name}", f"{database}_lake.{name}", "Scheduled", True)
            ids[path] = table_id
            made.append(path)
        return ids

    yield make
    for path in made:
        try:
            call(hive_cursor, "disable_tiering", table=path)
        except exc.OperationalError:
            pass


def drain(cursor, job: str, ids: set[int]) -> list[tuple]:
    """Heartbeat with request_table until nothing is assigned, renewing what
    the job already holds (as a worker does), so nothing times out meanwhile."""
    got = []
    for _ in range(len(ids) + 5):
        held = [{"table_id": r[1], "tiering_epoch": r[3]} for r in got]
        rows = call(cursor, "heartbeat", job_id=job, tiering_tables=held, request_table=True)
        assert all(r[4] is None for r in rows if r[0] == "tiering"), rows
        assigned = [r for r in rows if r[0] == "assigned"]
        if not assigned:
            break
        got.extend(assigned)
    return got


def test_enable_is_idempotent_and_bad_names_are_clear_errors(tables, hive_cursor):
    ids = tables(1)
    (path,) = ids
    ((table_id, _, _, _, created),) = call(hive_cursor, "enable_tiering", table=path)
    assert (table_id, created) == (ids[path], False)
    for name, fragment in [
        ("nodb_zz.nope", "table nodb_zz.nope does not exist"),
        ("shop.`x; DROP TABLE sys.schema_version; --`", "does not exist"),
        ("a.b.c.d", "invalid table name"),
        ("", "must not be empty"),
    ]:
        with pytest.raises(exc.OperationalError) as info:
            call(hive_cursor, "enable_tiering", table=name)
        assert fragment in info.value.args[0].status.errorMessage
    with pytest.raises(exc.OperationalError) as info:
        call(hive_cursor, "retry_tiering", table=path)
    assert "only a Failed table can be retried" in info.value.args[0].status.errorMessage
    assert call(hive_cursor, "list_tiering_statuses", table=path)[0][:4] == (*path.split("."), "Scheduled", 0) or \
        call(hive_cursor, "list_tiering_statuses", table=path)[0][2] == "Pending"


def test_concurrent_jobs_never_get_the_same_table_and_epochs_are_fresh(tables, server):
    ids = tables(6)
    ours = set(ids.values())
    results: dict[str, list] = {}
    errors: list[str] = []

    def job(name: str) -> None:
        try:
            conn = hive.connect("127.0.0.1", server.gateway.port, username=name)
            results[name] = drain(conn.cursor(), name, ours)
            conn.close()
        except Exception as e:  # noqa: BLE001
            errors.append(f"{name}: {e}")

    threads = [threading.Thread(target=job, args=(f"job-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assigned = [(name, row) for name, rows in results.items() for row in rows if row[1] in ours]
    table_ids = [row[1] for _, row in assigned]
    assert sorted(table_ids) == sorted(ours), "each table assigned exactly once"
    admin = Admin(LocalClient(server, None))
    by_path = {s.table_path: s for s in admin.list_tiering_statuses()}
    for _name, (_kind, _table_id, path, epoch, error) in assigned:
        assert error is None and epoch >= 1
        assert by_path[path].status == "Tiering"
        assert by_path[path].tiering_epoch == epoch  # the epoch of the assignment is the current one
    assert len({name for name, _ in assigned}) >= 2, "the work was spread over several jobs"


def test_failed_round_error_is_truncated_kept_and_cleared(tables, hive_cursor):
    ids = tables(1)
    (path,) = ids
    database, table = path.split(".")
    (assigned,) = drain(hive_cursor, "job-f", set(ids.values()))
    epoch = assigned[3]
    message = "failed: 'quoted' \"double\"\nline two\tünïcødé ✓ 日本 " + "x" * 10_000
    ((kind, table_id, _, _, error),) = call(
        hive_cursor, "heartbeat", job_id="job-f",
        failed_tables=[{"table_id": ids[path], "tiering_epoch": epoch, "error_message": message}],
    )
    assert (kind, error) == ("failed", None)
    row = status(hive_cursor, database, table)
    # Failed, or already Pending again when the 2 s back-off passed before this read (a loaded machine).
    assert (row[2], row[3]) in {("Failed", epoch), ("Pending", epoch + 1)}, row
    # One printable line: the newline and the tab a client sent are escaped (server/escaping.py).
    assert len(row[5]) == 2048 and row[5] == printable(message)[:2047] + "…"
    assert row[5].startswith("failed: 'quoted' \"double\"\\nline two\\tünïcødé ✓ 日本 ")
    assert row[6] is not None
    # After the back-off the table goes Pending with a new epoch; the error stays visible.
    row = wait_for(lambda: (r := status(hive_cursor, database, table)) and r[2] == "Pending" and r)
    assert row[3] == epoch + 1 and row[5].startswith("failed: 'quoted'")
    (assigned,) = drain(hive_cursor, "job-f", set(ids.values()))
    ((kind, _, _, _, error),) = call(
        hive_cursor, "heartbeat", job_id="job-f",
        finished_tables=[{"table_id": ids[path], "tiering_epoch": assigned[3], "rows": 3, "bytes": 30,
                          "files": 1, "tiered_position": 4}],
    )
    assert (kind, error) == ("finished", None)
    row = status(hive_cursor, database, table)
    assert row[2] == "Scheduled" and row[4] is not None and row[5] is None and row[6] is None
    hive_cursor.execute(
        "SELECT outcome, rows, end_position, error FROM sys.tiering_rounds WHERE table_id = %(id)s ORDER BY ended_at",
        {"id": ids[path]},
    )
    rounds = hive_cursor.fetchall()
    assert [r[0] for r in rounds] == ["failed", "finished"]
    assert rounds[1][1:3] == (3, 4) and rounds[0][3].startswith("failed: 'quoted'")


def test_a_stale_epoch_entry_fails_alone(tables, hive_cursor):
    ids = tables(2)
    assigned = {row[1]: row[3] for row in drain(hive_cursor, "job-s", set(ids.values()))}
    a, b = sorted(assigned)
    rows = call(
        hive_cursor, "heartbeat", job_id="job-s",
        tiering_tables=[{"table_id": a, "tiering_epoch": assigned[a] - 1},
                        {"table_id": b, "tiering_epoch": assigned[b]},
                        {"table_id": 999_999, "tiering_epoch": 1}],
        finished_tables=[{"table_id": b, "tiering_epoch": assigned[b]}],
    )
    answers = {(r[0], r[1]): r[4] for r in rows}
    assert f"tiering epoch {assigned[a] - 1} of table" in answers[("tiering", a)]
    assert f"is stale: the current epoch is {assigned[a]}" in answers[("tiering", a)]
    assert "table id 999999 is not registered" in answers[("tiering", 999_999)]
    assert answers[("tiering", b)] is None and answers[("finished", b)] is None


def test_a_silent_job_loses_its_table_with_an_error(tables, hive_cursor):
    ids = tables(1)
    (path,) = ids
    database, table = path.split(".")
    (assigned,) = drain(hive_cursor, "silent-job", set(ids.values()))
    row = wait_for(lambda: (r := status(hive_cursor, database, table)) and r[2] == "Pending" and r, timeout=40)
    assert row[3] == assigned[3] + 1
    assert "tiering job silent-job sent no heartbeat for" in row[5]
    assert "(tierlake.tiering.heartbeat-timeout is 8 s)" in row[5]
    rows = call(hive_cursor, "heartbeat", job_id="silent-job",
                tiering_tables=[{"table_id": ids[path], "tiering_epoch": assigned[3]}])
    assert "is stale" in rows[0][4]


def test_disable_removes_state_and_fences_the_job(tables, hive_cursor):
    ids = tables(1)
    (path,) = ids
    database, table = path.split(".")
    (assigned,) = drain(hive_cursor, "job-d", set(ids.values()))
    ((_, _, previous),) = call(hive_cursor, "disable_tiering", table=path)
    assert previous == "Tiering"
    assert status(hive_cursor, database, table) is None
    rows = call(hive_cursor, "heartbeat", job_id="job-d",
                finished_tables=[{"table_id": ids[path], "tiering_epoch": assigned[3]}])
    assert "is not registered for tiering" in rows[0][4]
    with pytest.raises(exc.OperationalError) as info:
        call(hive_cursor, "disable_tiering", table=path)
    assert "is not enabled for tiering" in info.value.args[0].status.errorMessage


def test_admin_api_in_process_and_over_jdbc(tables, server):
    ids = tables(2)
    local = Admin(LocalClient(server, None)).list_tiering_statuses()
    with Admin.connect(f"jdbc:hive2://127.0.0.1:{server.gateway.port}/default", user="admin") as remote:
        over_jdbc = remote.list_tiering_statuses()
        one = remote.list_tiering_statuses(next(iter(ids)))
    mine = sorted(ids)
    assert [s.table_path for s in local if s.table_path in ids] == mine
    assert [s.table_path for s in over_jdbc if s.table_path in ids] == mine
    assert [s.table_path for s in one] == [next(iter(ids))]
    assert {s.status for s in one} <= {"Scheduled", "Pending"}
    assert isinstance(one[0].tiering_epoch, int)


def test_job_status_lists_jobs_and_their_tables(tables, hive_cursor):
    ids = tables(1)
    (path,) = ids
    drain(hive_cursor, "job-v", set(ids.values()))
    rows = {r[0]: r for r in call(hive_cursor, "tiering_job_status")}
    assert "job-v" in rows
    assert path in rows["job-v"][5]


def test_table_ids_are_never_reused_while_the_history_is_behind(server, tables, hive_cursor):
    """disable→enable while the round history has not caught up: the new registration gets a new id,
    and its history holds none of the old registration's rows."""
    ids = tables(1)
    (path,) = ids
    history = server.coordinator.history
    release = threading.Event()
    real_append = history.table.append

    def held(rows, token=None):
        assert release.wait(60)
        return real_append(rows, token=token)

    history.table.append = held
    try:
        call(hive_cursor, "disable_tiering", table=path)
        ((new_id, *_),) = call(hive_cursor, "enable_tiering", table=path)
        call(hive_cursor, "disable_tiering", table=path)
        ((newer_id, *_),) = call(hive_cursor, "enable_tiering", table=path)
    finally:
        release.set()
        history.table.append = real_append
    assert len({ids[path], new_id, newer_id}) == 3 and ids[path] < new_id < newer_id
    hive_cursor.execute("SELECT count(*) FROM sys.tiering_rounds WHERE table_id = %(id)s", {"id": newer_id})
    assert hive_cursor.fetchall() == [(0,)]
    hive_cursor.execute("SELECT outcome FROM sys.tiering_rounds WHERE table_id = %(id)s", {"id": ids[path]})
    assert hive_cursor.fetchall() == [("disabled",)]


def test_table_ids_are_never_reused_after_kill_9(tmp_path):
    """The id counter is committed with the registration: a server killed right after a
    disable, restarted, hands the re-enabled table a new id."""
    import os
    import signal

    from tests.conftest import free_port, start_server_process, stop_process

    port, home = free_port(), tmp_path / "home"
    server = start_server_process(home, port, [], workers=0)
    try:
        with hive.connect("127.0.0.1", port, username="tester") as conn:
            cursor = conn.cursor()
            cursor.execute("CREATE DATABASE ids")
            cursor.execute("CREATE TABLE ids.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')")
            cursor.execute("SELECT table_id FROM sys.tiering_tables")
            (first,) = cursor.fetchall()[0]
            call(cursor, "disable_tiering", table="ids.t")
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        server = start_server_process(home, port, [], workers=0)
        with hive.connect("127.0.0.1", port, username="tester") as conn:
            cursor = conn.cursor()
            ((second, *_),) = call(cursor, "enable_tiering", table="ids.t")
        assert second > first
    finally:
        stop_process(server)
