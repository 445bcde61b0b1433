"""One statement cannot take the server down or hold it forever: a reader's
huge-string query fails with an error and the next query is answered; a long
query is cancelled after ``tierlake.query.reader-timeout`` (an admin's after
``tierlake.query.timeout``); a result larger than
``tierlake.query.max-result-size`` fails its query.

A server process of its own (not the shared one): when a bound breaks, this
JVM dies, not the rest of the run's. Its heap is small (1 GiB) so a 2 GB
string fails at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyhive import exc, hive

from tests.conftest import free_port, start_server_process, stop_process
from tierlake.server.bounds import resource_bounds
from tierlake.server.config.config import Config

TIMEOUT_S = 5  # readers' (tierlake.query.reader-timeout)
EVERYONE_TIMEOUT_S = 12  # everyone's (tierlake.query.timeout)
MAX_RESULT = 8 * 1024 * 1024

# Each allocates ~2 GB (or overflows an int) in a task thread, per row of range(1):
# evaluated in a task, not folded into a constant by the optimizer on the driver.
HUGE_IN_A_TASK = [
    "SELECT length(repeat(cast(id AS string), 2000000000)) FROM range(1)",
    "SELECT length(repeat(repeat(cast(id AS string), 100000), 100000)) FROM range(1)",
    "SELECT length(space(2000000000 + id)) FROM range(1)",
    "SELECT length(lpad(cast(id AS string), 2000000000, 'ab')) FROM range(1)",
    "SELECT max(length(rpad(v, 2000000000, 'x'))) FROM (SELECT cast(id AS string) AS v FROM range(4)) GROUP BY v % 2",
]
# Constant-folded: allocated by the optimizer in the statement's own thread on the driver.
HUGE_ON_THE_DRIVER = "SELECT length(repeat('x', 2000000000))"


@pytest.fixture(scope="module")
def bounded_server(tmp_path_factory):
    from tierlake.server.gateway.auth.passwords import set_user

    home = tmp_path_factory.mktemp("bounds-home")
    passwords = tmp_path_factory.mktemp("bounds-auth") / "passwords"
    set_user(passwords, "rita", "rita-pw", frozenset({"reader"}))
    set_user(passwords, "ann", "ann-pw", frozenset({"admin"}))
    port = free_port()
    proc = start_server_process(home, port, [
        "tierlake.master=local[2]",
        "spark.driver.memory=1g",
        "spark.sql.shuffle.partitions=2",
        f"tierlake.gateway.password-file={passwords}",
        f"tierlake.query.timeout={EVERYONE_TIMEOUT_S} s",
        f"tierlake.query.reader-timeout={TIMEOUT_S} s",
        f"tierlake.query.max-result-size={MAX_RESULT}",
    ])
    yield proc, port, home
    stop_process(proc, timeout=60)


def login(port, user="rita", password="rita-pw"):
    return hive.connect("127.0.0.1", port, username=user, password=password, auth="CUSTOM")


def error_of(cursor, statement) -> str:
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
        cursor.fetchall()
    status = info.value.args[0].status
    return status.errorMessage or "\n".join(status.infoMessages or [])


def answers(port, cursor=None) -> None:
    """SELECT 1 is answered, on ``cursor`` and on a new connection."""
    if cursor is not None:
        cursor.execute("SELECT 1")
        assert cursor.fetchall() == [(1,)]
    with login(port) as conn:
        fresh = conn.cursor()
        fresh.execute("SELECT 1")
        assert fresh.fetchall() == [(1,)]


@pytest.mark.integration
@pytest.mark.parametrize("statement", HUGE_IN_A_TASK, ids=["repeat", "repeat-repeat", "space", "lpad", "rpad-agg"])
def test_a_readers_huge_string_fails_and_the_server_answers_the_next_query(bounded_server, statement):
    proc, port, _ = bounded_server
    with login(port) as conn:
        cur = conn.cursor()
        message = error_of(cur, statement)
        assert ("java.lang.OutOfMemoryError" in message or "integer overflow" in message), message
        assert "stopped SparkContext" not in message, message
        assert proc.poll() is None
        answers(port, cur)


@pytest.mark.integration
def test_a_huge_string_folded_on_the_driver_fails_too(bounded_server):
    proc, port, _ = bounded_server
    with login(port) as conn:
        cur = conn.cursor()
        assert "java.lang.OutOfMemoryError" in error_of(cur, HUGE_ON_THE_DRIVER)
        answers(port, cur)
    assert proc.poll() is None


@pytest.mark.integration
def test_the_guard_says_what_happened_in_the_log(bounded_server):
    """TaskErrorGuard (server/bounds/java/TaskErrorGuard.java) kept the task's OutOfMemoryError to its
    query, and says so, instead of Spark's SparkUncaughtExceptionHandler ending the JVM."""
    _, port, home = bounded_server
    with login(port) as conn:
        error_of(conn.cursor(), HUGE_IN_A_TASK[0])
    log = (home / "logs" / "spark.log").read_text(encoding="utf-8", errors="replace")
    assert "its query fails, the server stays up" in log
    assert "SparkUncaughtExceptionHandler" not in log


@pytest.mark.integration
def test_a_readers_long_query_is_cancelled_after_the_timeout(bounded_server):
    proc, port, _ = bounded_server
    with login(port) as conn:
        cur = conn.cursor()
        started = time.monotonic()
        message = error_of(cur, "SELECT count(*) FROM range(0, 1000000000000000, 1, 2)")
        elapsed = time.monotonic() - started
        assert (f"because a reader's statement ran longer than tierlake.query.reader-timeout ({TIMEOUT_S} s)"
                in message), message
        assert TIMEOUT_S - 0.5 <= elapsed < TIMEOUT_S + 8, elapsed
        # A reader cannot lift it for its session.
        denied = error_of(cur, "SET spark.sql.thriftServer.queryTimeout=0")
        assert "permission denied" in denied and "admin" in denied
        answers(port, cur)
    assert proc.poll() is None


@pytest.mark.integration
def test_a_value_too_large_to_send_fails_its_fetch_and_the_connection_goes_on(bounded_server):
    proc, port, _ = bounded_server
    with login(port) as conn:
        cur = conn.cursor()
        # 18 MB in one row: more than a Java client's Thrift reads in one frame.
        message = error_of(cur, "SELECT repeat('ab', 9000000) AS v")
        assert "result too large" in message and "tierlake.gateway.max-reply-size" in message, message
        answers(port, cur)
    assert proc.poll() is None


@pytest.mark.integration
def test_an_admins_statement_has_the_longer_timeout(bounded_server):
    proc, port, _ = bounded_server
    with login(port, "ann", "ann-pw") as conn:
        cur = conn.cursor()
        # Longer than a reader may run, shorter than everyone's bound: it finishes.
        cur.execute(f"SELECT reflect('java.lang.Thread', 'sleep', cast(id + {(TIMEOUT_S + 2) * 1000} AS bigint)) "
                    "FROM range(1)")
        assert len(cur.fetchall()) == 1
        started = time.monotonic()
        message = error_of(cur, "SELECT count(*) FROM range(0, 1000000000000000, 1, 2)")
        elapsed = time.monotonic() - started
        assert (f"because the statement ran longer than tierlake.query.timeout ({EVERYONE_TIMEOUT_S} s)"
                in message), message
        assert EVERYONE_TIMEOUT_S - 0.5 <= elapsed < EVERYONE_TIMEOUT_S + 8, elapsed
    assert proc.poll() is None


@pytest.mark.integration
def test_short_statements_are_not_touched_by_the_timeout(bounded_server):
    _, port, _ = bounded_server
    with login(port) as conn:
        cur = conn.cursor()
        for _ in range(3):
            cur.execute("SELECT count(*) FROM range(0, 1000000, 1, 2)")
            assert cur.fetchall() == [(1000000,)]
        # A statement that outlives the deadline by fetching slowly is not cancelled after its jobs ended.
        cur.execute("SELECT id FROM range(3)")
        time.sleep(TIMEOUT_S + 1)
        assert cur.fetchall() == [(0,), (1,), (2,)]


@pytest.mark.integration
def test_a_result_above_the_max_result_size_fails_its_query(bounded_server):
    proc, port, _ = bounded_server
    with login(port) as conn:
        cur = conn.cursor()
        # ~50 MB of hex digits in two tasks (Spark compresses task results: repeated text would not do),
        # well over the 8 MiB bound.
        message = error_of(cur, "SELECT concat_ws('', transform(sequence(1, 2000), i -> "
                                "sha2(cast(id * 10000 + i AS string), 256))) FROM range(0, 400, 1, 2)")
        assert "spark.driver.maxResultSize" in message, message
        answers(port, cur)
    assert proc.poll() is None


# ---- the settings behind the bounds (no JVM) --------------------------------

def test_the_bounds_become_spark_settings():
    defaults = resource_bounds.spark_settings(Config(home=Path('.'), values={}))
    assert defaults == {"spark.sql.thriftServer.queryTimeout": f"{3600 + resource_bounds.BACKSTOP_S}s",
                        "spark.driver.maxResultSize": "536870912"}
    off = resource_bounds.spark_settings(Config(home=Path('.'), values={"tierlake.query.timeout": "0",
                                                        "tierlake.query.max-result-size": "0"}))
    assert off == {"spark.sql.thriftServer.queryTimeout": "0s", "spark.driver.maxResultSize": "0"}
    short = resource_bounds.spark_settings(Config(home=Path('.'), values={"tierlake.query.timeout": "1.5 s"}))
    assert short["spark.sql.thriftServer.queryTimeout"] == f"{2 + resource_bounds.BACKSTOP_S}s"

