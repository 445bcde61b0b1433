"""Request ids keep every promise (issue 50; docs/ingest.md, 'Request ids'), through the real
gateway with PyHive: concurrent and sequential retries of VALUES and queries from several
connections and processes write once; an id is remembered while its snapshot is kept; ids are
scoped by user, apply to the next statement only, are checked at SET and are not readable in
snapshot summaries; a client that goes away has its waiting INSERT dropped, and its retry writes
it once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from pyhive import hive

from tests.conftest import subprocess_env
from tests.server.tiering.conftest import run
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.ingest.writer import StreamWriter
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.session import iceberg_table

RID = "tierlake.write.request-id"


def connect(server, user: str = "tester"):
    return hive.connect("127.0.0.1", server.gateway.port, username=user)


def send(cursor, request_id: str | None, statement: str) -> None:
    if request_id is not None:
        cursor.execute(f"SET `{RID}`={request_id}")
    cursor.execute(statement)


def error_of(cursor, statement: str) -> str:
    with pytest.raises(Exception) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    return f"{status.sqlState} {status.errorMessage}"


def ids(spark, table: str) -> list[int]:
    return sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect())


def log_table(cursor, db: str, name: str = "events") -> str:
    run(cursor, f"CREATE TABLE {db}.{name} (id BIGINT, who STRING) TBLPROPERTIES "
                "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
    return f"{db}.{name}"


# One writer process: each statement from two connections (threads), the second 0-1 s after the
# first; then its first statement once more, sequentially. Even statements are VALUES, odd ones
# queries (a Spark job each).
WRITER = textwrap.dedent("""
    import random, sys, threading, time
    from pyhive import hive

    port, table, w, statements = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rnd = random.Random(w)
    conns = [hive.connect("127.0.0.1", port, username="tester") for _ in range(2)]
    errors = []

    def statement(n):
        base = w * 1000 + n * 10
        if n % 2 == 0:
            return f"INSERT INTO {table} VALUES ({base}, 'w{w}'), ({base + 1}, 'w{w}'), ({base + 2}, 'w{w}')"
        return f"INSERT INTO {table} SELECT {base} + id, 'w{w}' FROM range(3)"

    def send(conn, n, delay):
        time.sleep(delay)
        try:
            cursor = conn.cursor()
            cursor.execute("SET `tierlake.write.request-id`=writer-%d-statement-%d" % (w, n))
            cursor.execute(statement(n))
        except Exception as e:
            errors.append(repr(e))

    for n in range(statements):
        threads = [threading.Thread(target=send, args=(conns[0], n, 0)),
                   threading.Thread(target=send, args=(conns[1], n, rnd.random()))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    send(conns[0], 0, 0)
    print("errors", errors, flush=True)
    sys.exit(1 if errors else 0)
""")


def test_retries_of_values_and_queries_write_once_from_concurrent_connections_and_processes(server, spark,
                                                                                           hive_cursor, db):
    """Reproduction 1: 5 writer processes x 8 statements, each sent twice from two connections
    (concurrently or 1 s apart) and the first once more: every statement's rows exactly once.
    Before, the id of a query was checked before the table's lock: a retry waiting for the first
    attempt's query ran it again (queries 120 rows for 60 ids)."""
    table = log_table(hive_cursor, db)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(server.gateway.port), table, str(w), "8"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
               for w in range(5)]
    for p in writers:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, (out, err[-3000:])
    expected = sorted(w * 1000 + n * 10 + r for w in range(5) for n in range(8) for r in range(3))
    assert ids(spark, table) == expected


def test_a_retry_after_the_retention_is_answered_while_the_snapshot_is_kept(server, spark, hive_cursor, db):
    """Reproduction 2: with a retention of 2 s, a retry 4 s later (after another INSERT) wrote a
    second copy although the snapshot that committed the id was still there."""
    table = log_table(hive_cursor, db)
    ingest = jclass(STREAM_INGEST, spark.sparkContext._jvm)
    ledger = iceberg_table(spark, "sys.write_requests")
    retention_ms = int(server.config.duration("tierlake.write.request-id-retention").total_seconds() * 1000)
    ingest.configureLedger(ledger, 2000)
    try:
        with connect(server) as conn:
            cursor = conn.cursor()
            send(cursor, "kept-1", f"INSERT INTO {table} VALUES (1, 'a')")
            send(cursor, "kept-2", f"INSERT INTO {table} SELECT 2, 'a'")
            time.sleep(4)
            send(cursor, None, f"INSERT INTO {table} VALUES (3, 'b')")
            time.sleep(1.5)
            send(cursor, None, f"INSERT INTO {table} VALUES (4, 'b')")  # the committer prunes here
            send(cursor, "kept-1", f"INSERT INTO {table} VALUES (1, 'a')")
            send(cursor, "kept-2", f"INSERT INTO {table} SELECT 2, 'a'")
            # A new committer (as after a restart) reads the kept snapshots again.
            ingest.reset()
            send(cursor, "kept-1", f"INSERT INTO {table} VALUES (1, 'a')")
    finally:
        ingest.configureLedger(ledger, retention_ms)
    assert ids(spark, table) == [1, 2, 3, 4]


def test_request_ids_are_scoped_by_user(server, spark, hive_cursor, db):
    """Reproduction 3: writer B with writer A's id on the same table was told it succeeded and
    nothing was written."""
    table = log_table(hive_cursor, db)
    with connect(server, "alice") as a, connect(server, "bob") as b:
        send(a.cursor(), "checkout-7-v2", f"INSERT INTO {table} VALUES (1, 'alice')")
        send(b.cursor(), "checkout-7-v2", f"INSERT INTO {table} VALUES (2, 'bob')")
        send(a.cursor(), "checkout-7-v2", f"INSERT INTO {table} VALUES (1, 'alice')")  # A's retry
        send(b.cursor(), "checkout-7-v2", f"INSERT INTO {table} SELECT 2, 'bob'")  # B's retry, as a query
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT id, who FROM {table}").collect())
    assert rows == [(1, "alice"), (2, "bob")]


def test_a_retried_insert_too_big_to_describe_still_goes_through_the_committer(server, spark, hive_cursor, db):
    """Development mode parses a statement only to route it, and describes at most
    ``ROUTING_PLAN_NODES`` of its plan: an INSERT of thousands of rows is routed on its root alone, and
    still written by the committer, so its retry with the same request id writes nothing."""
    from tierlake.server.gateway.auth.planauth import ROUTING_PLAN_NODES

    table = log_table(hive_cursor, db)
    rows = ROUTING_PLAN_NODES // 2
    statement = f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, 'w{i % 7}')" for i in range(rows))
    with connect(server) as conn:
        cursor = conn.cursor()
        send(cursor, "bulk-1", statement)
        send(cursor, "bulk-1", statement)  # the client's retry
    assert ids(spark, table) == list(range(rows))


def test_an_id_names_the_next_statement_only_whatever_it_is_and_however_it_ends(server, spark, hive_cursor, db):
    """Reproduction 3: an id set before a write to a plain table (or before a failed INSERT)
    stayed set and tagged the next, unrelated stream INSERT; a retry of the id then wrote nothing."""
    table = log_table(hive_cursor, db)
    run(hive_cursor, f"CREATE TABLE {db}.orders (id BIGINT, amount DOUBLE) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2')")
    spark.sql(f"CREATE TABLE {db}.plain (id BIGINT) USING iceberg")
    with connect(server) as conn:
        cursor = conn.cursor()
        send(cursor, "plain-1", f"INSERT INTO {db}.plain VALUES (1)")
        send(cursor, None, f"INSERT INTO {table} VALUES (10, 'untagged')")
        send(cursor, "plain-1", f"INSERT INTO {table} VALUES (11, 'plain-1')")  # its id was never used
        cursor.execute(f"SET `{RID}`=failed-1")
        assert error_of(cursor, f"INSERT INTO {db}.orders (id, amount, _change_type) VALUES (1, 1, '+X')"
                        ).startswith("22023 ")
        send(cursor, None, f"INSERT INTO {table} VALUES (12, 'untagged')")
        send(cursor, "failed-1", f"INSERT INTO {table} VALUES (13, 'failed-1')")
        # A SET of something else between the id and its INSERT does not take it.
        cursor.execute(f"SET `{RID}`=set-between")
        cursor.execute("SET spark.sql.shuffle.partitions=2")
        cursor.execute(f"INSERT INTO {table} VALUES (14, 'set-between')")
        send(cursor, "set-between", f"INSERT INTO {table} VALUES (14, 'set-between')")
        # SET shows the id until the next statement.
        cursor.execute(f"SET `{RID}`=shown")
        cursor.execute(f"SET `{RID}`")
        assert cursor.fetchall() == [(RID, "shown")]
        cursor.execute("SELECT 1")
        cursor.fetchall()
        cursor.execute(f"SET `{RID}`")
        assert cursor.fetchall() == [(RID, "<undefined>")]
    assert ids(spark, table) == [10, 11, 12, 13, 14]
    assert ids(spark, f"{db}.plain") == [1]


def test_request_ids_are_not_readable_in_snapshot_summaries(server, spark, hive_cursor, db):
    """Reproduction 3: any reader listed every producer's ids through `.snapshots`."""
    table = log_table(hive_cursor, db)
    with connect(server) as conn:
        send(conn.cursor(), "secret-order-991", f"INSERT INTO {table} VALUES (1, 'x')")
        send(conn.cursor(), "secret-order-992", f"INSERT INTO {table} SELECT 2, 'x'")
    hive_cursor.execute(f"SELECT summary['{RID}'] FROM {table}.snapshots WHERE summary['{RID}'] IS NOT NULL")
    summaries = [r[0] for r in hive_cursor.fetchall()]
    assert len(summaries) == 2 and all(s.startswith("k1:") and "secret" not in s for s in summaries), summaries


@pytest.mark.parametrize("value, why", [
    ("x" * 257, "257 characters, at most 256"),
    ("a\u2028b", "U+2028"), ("a\u0085b", "U+0085"), ("a\u007fb", "U+007F"), ("a\u202eb", "U+202E"),
])
def test_bad_request_ids_are_refused_at_set(server, spark, hive_cursor, db, value, why):
    """Reproduction 3: a 257-character id was accepted by SET and then every INSERT of the session
    failed; ids with line separators, C1 controls, DEL or bidi overrides were accepted."""
    table = log_table(hive_cursor, db)
    with connect(server) as conn:
        cursor = conn.cursor()
        text = error_of(cursor, f"SET `{RID}`={value}")
        assert text.startswith("22023 ") and why in text and "refused" in text, text
        cursor.execute(f"INSERT INTO {table} VALUES (1, 'ok')")  # the session goes on, untagged
        send(cursor, "a" * 256, f"INSERT INTO {table} VALUES (2, 'ok')")
        send(cursor, "a" * 256, f"INSERT INTO {table} VALUES (2, 'ok')")
    assert ids(spark, table) == [1, 2]


def test_a_misspelt_tierlake_setting_is_refused_at_set(server, hive_cursor):
    """Issue 54: ``SET `tierlake.write.requestid`=abc`` was accepted silently."""
    with connect(server) as conn:
        cursor = conn.cursor()
        text = error_of(cursor, "SET `tierlake.write.requestid`=abc")
        assert text.startswith("42704 ") and "did you mean tierlake.write.request-id?" in text, text
        text = error_of(cursor, "SET `tierlake.write.request-id-retention`=1s")
        assert text.startswith("42704 ") and "server setting" in text, text
        cursor.execute("SET spark.sql.shuffle.partitions=3")  # Spark's own settings as before
        cursor.execute("SET spark.sql.shuffle.partitions")
        assert cursor.fetchall() == [("spark.sql.shuffle.partitions", "3")]


def test_two_identical_asynchronous_statements_of_one_session_both_go_through_the_committer(server, spark,
                                                                                              hive_cursor, db):
    """The suspicion of issue 50, through the gateway: the same INSERT twice at once in one
    session (two cursors of one connection, asynchronous): both committed by the table's committer."""
    table = log_table(hive_cursor, db)
    writer: StreamWriter = server.gateway.handler.by_name["ingest"].writer
    before = writer.counters()["statements"]
    with connect(server) as conn:
        cursors = [conn.cursor(), conn.cursor()]
        statement = f"INSERT INTO {table} SELECT id, 'async' FROM range(2)"
        for c in cursors:
            c.execute(statement, async_=True)
        for c in cursors:
            while c.poll().operationState in (0, 1):  # INITIALIZED, RUNNING
                time.sleep(0.05)
            assert c.poll().operationState == 2, c.poll()  # FINISHED
    assert writer.counters()["statements"] - before == 2
    assert ids(spark, table) == [0, 0, 1, 1]


# A writer that sends one INSERT (with a request id) and is killed while it waits.
VICTIM = textwrap.dedent("""
    import sys
    from pyhive import hive

    port, request_id, statement = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    cursor = hive.connect("127.0.0.1", port, username="tester").cursor()
    cursor.execute("SET `tierlake.write.request-id`=" + request_id)
    print("sending", flush=True)
    cursor.execute(statement)
    print("answered", flush=True)
""")


def slow_query(table: str, value: int, seconds: float) -> str:
    """An INSERT … SELECT that holds the table's commit lock for ``seconds`` (its task sleeps)."""
    ms = int(seconds * 1000)
    return (f"INSERT INTO {table} SELECT {value} + length(java_method('java.lang.Thread', 'sleep', "
            f"CAST({ms} AS BIGINT))) * 0, 'slow' FROM range(1)")


@pytest.mark.parametrize("form", ["values", "query"])
def test_a_client_that_goes_away_has_its_insert_dropped_and_its_retry_writes_once(server, spark, hive_cursor,
                                                                                  db, form):
    """A dropped connection cancels its ingest INSERT before it commits (before, it was committed
    for nobody); the retry with the same id writes it, once."""
    table = log_table(hive_cursor, db)
    statement = (f"INSERT INTO {table} VALUES (7, 'victim')" if form == "values"
                 else slow_query(table, 7, 6))
    holder_done = threading.Event()

    def hold() -> None:  # another writer's query holds the table's commit lock meanwhile
        try:
            with connect(server) as conn:
                conn.cursor().execute(slow_query(table, 1, 5 if form == "values" else 0.1))
        finally:
            holder_done.set()

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(1.5 if form == "values" else 0)
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, str(server.gateway.port), f"victim-{form}", statement],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    assert victim.stdout.readline().strip() == "sending"
    time.sleep(2.5)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    holder.join(timeout=120)
    assert holder_done.is_set()
    time.sleep(1 if form == "values" else 6)  # past the end the victim's query would have had
    assert ids(spark, table) == [1], "the INSERT of a client that went away was committed"
    with connect(server) as conn:
        retry = f"INSERT INTO {table} VALUES (7, 'victim')" if form == "values" else slow_query(table, 7, 0.1)
        send(conn.cursor(), f"victim-{form}", retry)
        send(conn.cursor(), f"victim-{form}", retry)
    assert ids(spark, table) == [1, 7]


def test_a_retried_ctas_into_a_stream_table_is_answered_again(server, spark, hive_cursor, db):
    """CTAS into a stream table: a retry with the same request id (another connection, the same
    user) is answered again and writes nothing, where it said "already exists" before; without
    the id, or from another user, the table exists."""
    ctas = (f"CREATE TABLE {db}.made TBLPROPERTIES ('table.datalake.enabled'='true') "
            "AS SELECT id, 'x' AS who FROM range(3)")
    with connect(server) as a, connect(server) as b:
        send(a.cursor(), "ctas-1", ctas)
        retry = b.cursor()
        send(retry, "ctas-1", ctas)
        assert [(r[1], r[2], r[4]) for r in retry.fetchall()] == [(f"{db}.made", f"{db}_lake.made", 0)]
        assert error_of(b.cursor(), ctas).startswith("42P07 ")
    with connect(server, "someone-else") as c:
        cursor = c.cursor()
        cursor.execute(f"SET `{RID}`=ctas-1")
        assert error_of(cursor, ctas).startswith("42P07 ")
    assert ids(spark, f"{db}.made") == [0, 1, 2]
