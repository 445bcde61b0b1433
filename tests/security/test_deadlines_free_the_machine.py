"""Timeouts that free the machine (issue 51, "What to build" item 2).

A reader's statement is stopped within its timeout plus a few seconds
wherever it runs, and its cores are free again:

- in the driver, outside any Spark job: the optimizer folding a CPU-heavy
  constant (``levenshtein`` of two 200,000-character strings, ~150 s of one
  core) ignores job cancellation and interrupts; the statement's deadline
  stops its thread (StatementDeadline.java) and the client is told so;
- over ``sys`` tables only, which the gateway answers through its own Spark
  sessions (server/gateway/routing/sys_reads.py): those now run as the
  client's user and role, so the reader's timeout and Spark's check of the
  resolved plan as a reader (AuthzCheck.java) apply there too;
- in tasks, with an admin's query alongside: the reader's bomb ends at its
  timeout, no task of it is left running, and the admin's
  ``SELECT count(*) FROM range(1000)`` is answered meanwhile (latencies
  printed; bench/statement_deadlines.py repeats it, bench/RESULTS.md).

Through the real gateway (auth on, the server's own handler chain) on the
shared server, whose readers' timeout is set to 5 s for this module.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid

import pytest
from pyhive import exc, hive

from tests.security.conftest import PASSWORD
from tierlake.server.gateway.transport import errors
from tierlake.server.gateway.transport.protocol import SessionInfo, Statement

pytestmark = pytest.mark.integration

TIMEOUT_S = 5
REASON = f"because a reader's statement ran longer than tierlake.query.reader-timeout ({TIMEOUT_S} s)"
# Bounds tied to the timeout, generous for a loaded 2-core machine (the issue asks for timeout + 5 s).
ERROR_BY_S = TIMEOUT_S + 5
FREED_WITHIN_S = 5
# ~150 s of one core, folded by the optimizer on the driver; a few KB of memory.
FOLDED = "levenshtein(repeat('a', 200000), repeat('b', 200000))"
ADMIN_QUERY = "SELECT count(*) FROM range(1000)"


def sys_read_verdict(gateway, text: str) -> str:
    """What the gateway's sys read route makes of ``text`` (on Spark's parse in the driver's session)."""
    statement = Statement(text, SessionInfo("ann", b"v" * 16, 9, "test"), parse=gateway.authorizer.parser(None))
    return gateway.handler.by_name["sys-read"].verdict(statement).kind


def _cursor(gateway, user):
    return hive.connect("127.0.0.1", gateway.port, username=user, password=PASSWORD[user], auth="CUSTOM").cursor()


def _error(cursor, statement) -> tuple[str, str, float]:
    """(SQLSTATE, message, seconds until the error)."""
    started = time.monotonic()
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
        cursor.fetchall()
    status = info.value.args[0].status
    return status.sqlState, status.errorMessage or "\n".join(status.infoMessages or []), time.monotonic() - started


@pytest.fixture(scope="module")
def readers_timeout(server):
    """The server's readers' timeout set to TIMEOUT_S for this module (StatementDeadline.readers)."""
    deadline = server.spark.sparkContext._jvm.io.tierlake.internal.StatementDeadline.installed()
    assert deadline is not None, "the server installs a statement deadline"
    before = (deadline.readerTimeoutMs(), deadline.readerReason())
    deadline.readers(TIMEOUT_S * 1000, REASON)
    yield deadline
    deadline.readers(*before)


def _busy_threads(server, *frames: str) -> list[str]:
    """Names of the JVM's runnable threads with one of ``frames`` (class.method prefixes) on their stack."""
    jvm = server.spark.sparkContext._jvm
    found = []
    for entry in jvm.java.lang.Thread.getAllStackTraces().entrySet().toArray():
        thread, stack = entry.getKey(), entry.getValue()
        if str(thread.getState().toString()) != "RUNNABLE":
            continue
        names = [f"{f.getClassName()}.{f.getMethodName()}" for f in stack]
        if any(name.startswith(frame) for name in names for frame in frames):
            found.append(str(thread.getName()))
    return found


def _freed(server, *frames: str) -> bool:
    """Whether, within FREED_WITHIN_S, no runnable thread is in ``frames`` any more."""
    until = time.monotonic() + FREED_WITHIN_S
    while _busy_threads(server, *frames):
        if time.monotonic() > until:
            return False
        time.sleep(0.2)
    return True


LEVENSHTEIN = "org.apache.spark.unsafe.types.UTF8String.levenshteinDistance"


def _stopped(server, auth_gateway, statement: str, where: str):
    """The reader's ``statement`` is stopped while planned (57014) within the bound, and its core freed;
    returns the reader's cursor."""
    reader = _cursor(auth_gateway, "rita")
    state, message, elapsed = _error(reader, statement)
    print(f"\n{where}: the reader's error after {elapsed:.1f} s (timeout {TIMEOUT_S} s)")
    assert (state, message) == (errors.STOPPED_SQLSTATE, errors.STOPPED_MESSAGE), message
    assert elapsed < ERROR_BY_S, elapsed
    assert _freed(server, LEVENSHTEIN), _busy_threads(server, LEVENSHTEIN)
    return reader


def test_a_readers_constant_folded_on_the_driver_is_stopped_at_its_timeout(server, auth_gateway, readers_timeout):
    reader = _stopped(server, auth_gateway, f"SELECT {FOLDED} AS d", "folded on the driver")
    reader.execute("SELECT 1")
    assert reader.fetchall() == [(1,)]


@pytest.mark.parametrize("statement", [
    f"SELECT d FROM VALUES ({FOLDED}) AS t(d)",
    f"SELECT 1 AS one LIMIT length(CAST({FOLDED} AS STRING))",
], ids=["inline-table", "limit"])
def test_a_readers_constant_evaluated_by_the_analyser_is_stopped_at_its_timeout(server, auth_gateway,
                                                                               readers_timeout, statement):
    """The analyser evaluates an inline table's rows and a LIMIT's value itself; its thread was never
    stopped (it might have been analysing the thread's next statement), so the reader's error came when
    the ~150 s constant was done. The statement's thread is now noted when its text is parsed."""
    reader = _stopped(server, auth_gateway, statement, "evaluated by the analyser")
    reader.execute("SELECT 1")
    assert reader.fetchall() == [(1,)]


def test_a_readers_single_long_row_in_a_task_frees_its_core_after_the_timeout(server, auth_gateway,
                                                                              readers_timeout):
    """One row per task whose expression runs ~150 s (``levenshtein`` of strings built from a column, so
    nothing is folded): Spark's kill is read between rows, so before, the reader got the timeout error and
    both tasks kept their cores until their row was done (TaskReaper.java stops them now)."""
    reaper = server.spark.sparkContext._jvm.io.tierlake.internal.TaskReaper
    before = reaper.reaped()
    reader = _cursor(auth_gateway, "rita")
    statement = ("SELECT levenshtein(repeat(cast(id AS string), 200000), repeat('b', 200000)) AS d "
                 "FROM range(0, 2, 1, 2)")
    _, message, elapsed = _error(reader, statement)
    print(f"\none long row per task: the reader's error after {elapsed:.1f} s (timeout {TIMEOUT_S} s)")
    assert REASON in message, message
    assert elapsed < ERROR_BY_S, elapsed
    assert _freed(server, LEVENSHTEIN), _busy_threads(server, LEVENSHTEIN)
    assert reaper.reaped() - before == 2
    reader.execute("SELECT count(*) FROM range(100)")  # the server and its executor go on
    assert reader.fetchall() == [(100,)]


def test_a_readers_sys_read_runs_with_the_readers_timeout(server, auth_gateway, readers_timeout):
    statement = f"SELECT {FOLDED} AS d FROM sys.procedures LIMIT 1"
    assert sys_read_verdict(auth_gateway, statement) == "sys-read"  # the gateway answers it itself
    _stopped(server, auth_gateway, statement, "folded over sys")


def test_a_readers_sys_read_in_tasks_is_cancelled_at_the_readers_timeout(server, auth_gateway, readers_timeout):
    # 23 procedures to the 6th power, a digest each: minutes of tasks (23^5 took 13 s with no timeout).
    statement = ("SELECT count(*) AS n FROM sys.procedures a, sys.procedures b, sys.procedures c, "
                 "sys.procedures d, sys.procedures e, sys.procedures f "
                 "WHERE sha2(concat(a.name, b.name, c.name, d.name, e.name, f.name), 512) = 'x'")
    assert sys_read_verdict(auth_gateway, statement) == "sys-read"
    _, message, elapsed = _error(_cursor(auth_gateway, "rita"), statement)
    print(f"\nsys read in tasks: the reader's error after {elapsed:.1f} s (timeout {TIMEOUT_S} s)")
    assert REASON in message, message
    assert elapsed < ERROR_BY_S, elapsed
    assert _freed(server, "org.apache.commons.codec.digest.DigestUtils"), "a task of the sys read still runs"


def test_a_clients_cancel_of_a_sys_read_stops_its_spark_jobs(server, auth_gateway):
    """An admin's (no reader timeout) sys read of minutes of tasks, cancelled by its client after 2 s:
    before, the gateway ran it synchronously on its own backend session, the cancel reached nothing and
    its tasks ran on for minutes; now the cancel is sent to Spark's operation and the tasks stop."""
    marker = uuid.uuid4().hex[:12]
    statement = ("SELECT count(*) AS n FROM sys.procedures a, sys.procedures b, sys.procedures c, "
                 "sys.procedures d, sys.procedures e, sys.procedures f "
                 f"WHERE sha2(concat(a.name, b.name, c.name, d.name, e.name, f.name), 256) = '{marker}'")
    assert sys_read_verdict(auth_gateway, statement) == "sys-read"
    admin = _cursor(auth_gateway, "ann")
    admin.execute(statement, async_=True)
    until = time.monotonic() + 60
    while (_job_of(server, marker) is None or _job_of(server, marker).numActiveTasks() == 0) \
            and time.monotonic() < until:
        time.sleep(0.1)
    assert _job_of(server, marker) is not None, "the sys read runs as a Spark job"
    time.sleep(2)
    admin.cancel()
    cancelled = time.monotonic()
    job = _job_of(server, marker)
    while (job.numActiveTasks() > 0 or str(job.status()) == "RUNNING") and time.monotonic() < cancelled + 10:
        time.sleep(0.2)
        job = _job_of(server, marker)
    print(f"\nsys read cancelled by its client: its job {job.status()} "
          f"{time.monotonic() - cancelled:.1f} s after the cancel")
    assert job.numActiveTasks() == 0 and str(job.status()) != "RUNNING", (job.numActiveTasks(), job.status())
    admin = _cursor(auth_gateway, "ann")
    admin.execute("SELECT count(*) FROM sys.procedures")
    assert admin.fetchall()[0][0] > 0


def test_a_readers_sys_read_is_checked_on_the_resolved_plan_as_a_readers(auth_gateway):
    # A pattern taken from data is the admin's (AuthzCheck); the admin's answer is not served to the reader.
    statement = "SELECT count(*) AS n FROM sys.procedures WHERE name rlike role"
    assert sys_read_verdict(auth_gateway, statement) == "sys-read"
    admin, reader = _cursor(auth_gateway, "ann"), _cursor(auth_gateway, "rita")
    admin.execute(statement)
    assert admin.fetchall()[0][0] >= 0
    state, message, _ = _error(reader, statement)
    assert state == "42501", message
    assert "a regular expression that is not a literal (rlike) needs the admin role" in message, message
    admin.execute(statement)  # still the admin's
    assert admin.fetchall()[0][0] >= 0


def _job_of(server, marker: str):
    """The Spark job whose description holds ``marker`` (the statement's text), as the status store sees it."""
    jobs = server.spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    for i in range(jobs.size()):
        job = jobs.apply(i)
        description = job.description()
        if description.isDefined() and marker in str(description.get()):
            return job
    return None


def _latency(cursor) -> float:
    started = time.monotonic()
    cursor.execute(ADMIN_QUERY)
    assert cursor.fetchall() == [(1000,)]
    return time.monotonic() - started


def test_a_readers_cpu_bomb_frees_its_cores_and_an_admin_runs_meanwhile(server, auth_gateway, readers_timeout):
    admin, reader = _cursor(auth_gateway, "ann"), _cursor(auth_gateway, "rita")
    idle = [_latency(admin) for _ in range(5)]
    marker = uuid.uuid4().hex[:12]
    # Every core, for far longer than the timeout: 20,000 short tasks of digests.
    bomb = (f"SELECT count(*) FROM range(0, 2000000000, 1, 20000) "
            f"WHERE sha2(concat(cast(id AS string), '{marker}'), 256) = 'x'")
    outcome: dict = {}

    def run_bomb():
        outcome["error"] = _error(reader, bomb)

    bombing = threading.Thread(target=run_bomb, daemon=True)
    bombing.start()
    until = time.monotonic() + 30
    while _job_of(server, marker) is None and time.monotonic() < until:
        time.sleep(0.1)
    busy = []  # the admin's queries sent while the bomb ran
    while bombing.is_alive():
        busy.append(_latency(admin))
    bombing.join()
    _, message, elapsed = outcome["error"]
    ended = time.monotonic()
    job = _job_of(server, marker)
    while job is not None and (job.numActiveTasks() > 0 or str(job.status()) == "RUNNING") \
            and time.monotonic() < ended + FREED_WITHIN_S:
        time.sleep(0.2)
        job = _job_of(server, marker)
    after = [_latency(admin) for _ in range(5)]
    print(f"\nCPU bomb in tasks: the reader's error after {elapsed:.1f} s (timeout {TIMEOUT_S} s); admin's "
          f"{ADMIN_QUERY}: idle median {statistics.median(idle):.3f} s, under the bomb median "
          f"{statistics.median(busy) if busy else float('nan'):.3f} s max {max(busy, default=0):.3f} s "
          f"({len(busy)} runs), after median {statistics.median(after):.3f} s")
    assert REASON in message, message
    assert elapsed < ERROR_BY_S, elapsed
    assert job is not None, "the bomb ran as a Spark job"
    assert job.numActiveTasks() == 0 and str(job.status()) != "RUNNING", (job.numActiveTasks(), job.status())
    # Answered while the bomb held every core (the FAIR scheduler's next free slot); not timed here beyond
    # the bound any statement now has (a loaded machine makes the latency itself noisy: bench/RESULTS.md).
    assert busy and max(busy) < ERROR_BY_S, busy
