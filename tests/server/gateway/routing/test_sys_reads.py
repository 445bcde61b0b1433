"""The gateway's cache of ``sys`` reads (server/gateway/routing/sys_reads.py) against
Spark itself: a corpus of BI-style queries through the gateway and directly
on the internal Spark Thrift Server must give the same rows and column types,
with coordinator state changes in between so a stale answer would show."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

import pytest
from pyhive import hive

from tests.server.tiering.conftest import run

pytestmark = pytest.mark.integration

S = "sys.lake_tiering_status"
CORPUS = [
    f"SELECT * FROM {S}",
    f"SELECT * FROM {S} ORDER BY database_name, table_name",
    f"SELECT status AS status, count(*) AS count FROM {S} GROUP BY status ORDER BY count DESC LIMIT 10000",
    f"SELECT database_name, table_name, status FROM {S} WHERE database_name = '{{db}}' ORDER BY table_name",
    f"SELECT count(*) FROM {S}",
    f"SELECT count(DISTINCT database_name) AS dbs, max(tiering_epoch) AS max_epoch FROM {S}",
    f"SELECT table_name, tiering_epoch FROM {S} WHERE tiering_epoch > 0 AND database_name = '{{db}}'",
    f"SELECT table_name FROM {S} WHERE status IN ('Failed', 'Pending') AND database_name = '{{db}}'",
    f"SELECT table_name, last_error FROM {S} WHERE last_error IS NOT NULL AND database_name = '{{db}}'",
    f"SELECT table_name, last_error FROM {S} WHERE last_error LIKE '%boom%'",
    f"SELECT CAST(last_tiered_time AS DATE) AS day, count(*) AS n FROM {S} GROUP BY CAST(last_tiered_time AS DATE)",
    f"SELECT table_name, CAST(last_tiered_time AS STRING) AS t FROM {S} WHERE database_name = '{{db}}'",
    f"SELECT table_name, date_format(last_tiered_time, 'yyyy-MM-dd HH:mm') AS minute FROM {S}",
    f"SELECT table_name, to_date(last_error_time) AS d, year(last_error_time) AS y FROM {S}",
    f"SELECT date_trunc('HOUR', last_tiered_time) AS __timestamp, count(*) AS count FROM {S} "
    "GROUP BY date_trunc('HOUR', last_tiered_time) ORDER BY count DESC LIMIT 1000",
    f"SELECT table_name, unix_timestamp(last_tiered_time) AS epoch_s FROM {S}",
    f"SELECT CAST(tiering_epoch AS DOUBLE) / 2 AS half, CAST(tiering_epoch AS DECIMAL(10,2)) AS d FROM {S}",
    f"SELECT concat(database_name, '.', table_name) AS path, upper(status) AS s FROM {S} ORDER BY path",
    f"SELECT status, collect_set(table_name) AS tables FROM {S} WHERE database_name = '{{db}}' GROUP BY status",
    f"SELECT database_name, sum(tiering_epoch) AS epochs, avg(tiering_epoch) AS avg_epoch FROM {S} "
    "GROUP BY database_name HAVING count(*) > 0",
    f"SELECT * FROM {S} WHERE database_name = '{{db}}' ORDER BY table_name LIMIT 2",
    f"SELECT * FROM (SELECT table_name, status FROM {S} WHERE database_name = '{{db}}') AS virtual_table LIMIT 100",
    f"WITH t AS (SELECT * FROM {S} WHERE database_name = '{{db}}') SELECT status, count(*) FROM t GROUP BY status",
    f"SELECT table_name, CASE WHEN status = 'Failed' THEN 1 ELSE 0 END AS failing FROM {S}",
    f"SELECT table_name, row_number() OVER (PARTITION BY database_name ORDER BY table_name) AS rn FROM {S}",
    f"SELECT coalesce(last_error, 'ok') AS e, count(*) FROM {S} GROUP BY coalesce(last_error, 'ok')",
    f"SELECT DISTINCT status FROM {S}",
    f"SELECT table_name FROM {S} WHERE database_name = '{{db}}' "
    f"UNION ALL SELECT table_name FROM {S} WHERE status = 'Failed'",
    f"SELECT s.table_name, r.outcome FROM {S} s LEFT JOIN sys.tiering_rounds r "
    "ON r.database_name = s.database_name AND r.table_name = s.table_name",
    f"SELECT s.status, count(r.table_id) AS rounds FROM {S} s LEFT JOIN sys.tiering_rounds r "
    "ON r.database_name = s.database_name AND r.table_name = s.table_name GROUP BY s.status",
    # A total order: under LIMIT, rows tied on started_at (the NULLs of disabled tables) would make
    # the 50 kept depend on the order Spark happens to read the files in.
    "SELECT * FROM sys.tiering_rounds ORDER BY started_at DESC, table_id, tiering_epoch, ended_at, outcome LIMIT 50",
    "SELECT outcome, count(*) AS n, avg(duration_ms) AS ms FROM sys.tiering_rounds GROUP BY outcome",
    "SELECT name, role FROM sys.procedures ORDER BY name",
    "SELECT role, count(*) FROM sys.procedures GROUP BY role ORDER BY role",
    "SELECT name FROM sys.procedures WHERE read_only AND name LIKE '%tier%'",
    "SELECT * FROM sys.tiering_job_status",
    "SELECT job_id, size(tiering_tables) AS n FROM sys.tiering_job_status",
    # A total order under the LIMIT: rows tied on the sort keys make the kept ten depend on file order.
    "SELECT * FROM sys.lake_data_quality ORDER BY run_time DESC, run_id, expectation LIMIT 10",
    "SELECT * FROM sys.create_table_as_log",
    "SELECT * FROM sys.data_quality_expectations",
    "SELECT table_id, database_name, table_name, status, properties FROM sys.tiering_tables",
    f"SELECT table_name, length(table_name) AS len, substr(status, 1, 3) AS s3 FROM {S} "
    "WHERE table_name RLIKE '^t[0-9]+$'",
    f"SELECT * FROM {S} WHERE table_name = (SELECT max(table_name) FROM {S} WHERE database_name = '{{db}}')",
    f"SELECT table_name FROM {S} s WHERE EXISTS (SELECT 1 FROM sys.tiering_tables t WHERE t.table_name = "
    "s.table_name AND t.database_name = s.database_name AND t.tiering_epoch >= 0)",
    f"SELECT /* a BI tool's comment */ count(*) AS `COUNT(*)` FROM {S}",
]
# Statements the cache must leave to Spark: the time, chance, a view over the clock.
NOT_CACHED = [
    f"SELECT now() AS t, count(*) FROM {S}",
    f"SELECT current_timestamp, count(*) FROM {S}",
    f"SELECT rand() AS r FROM {S}",
    f"SELECT unix_timestamp() AS t FROM {S}",
    "SELECT * FROM sys.lake_tiering_lag",
    "SELECT * FROM sys.kv_snapshot_leases",
    "SELECT count(*) FROM sys.tiering_tables.snapshots",
]


@pytest.fixture(scope="module")
def direct(server):
    """PyHive straight to the internal Spark Thrift Server: Spark's own answers."""
    # The internal server takes only the gateway's login (docs/security.md): present its secret.
    conn = hive.connect("127.0.0.1", server.thrift_port, username="tester", password=server.internal_secret,
                        auth="CUSTOM")
    yield conn.cursor()
    conn.close()


def answer(cursor, statement: str):
    cursor.execute(statement)
    types = [(d[0], d[1]) for d in cursor.description]
    return types, cursor.fetchall()



def verdict_of(server, text: str) -> str:
    """What the sys read route makes of ``text`` (on Spark's parse in the driver's session)."""
    from tierlake.server.gateway.transport.protocol import SessionInfo, Statement

    statement = Statement(text, SessionInfo("tester", b"v" * 16, 9, "test"),
                          parse=server.gateway.authorizer.parser(None))
    return server.gateway.handler.by_name["sys-read"].verdict(statement).kind

def same(a, b, ordered: bool) -> bool:
    if a[0] != b[0]:
        return False
    return a[1] == b[1] if ordered else sorted(map(repr, a[1])) == sorted(map(repr, b[1]))


def compare(gateway, direct, handler, statement: str) -> bool:
    """The gateway's answer, read between two of Spark's: when Spark answered
    the same both times, the state did not change meanwhile and the gateway
    must have answered exactly that. The scheduler and housekeeping commit
    at any time (and a loaded machine makes that often): then read again,
    until a checked answer also came from the cache. Whether one did."""
    ordered = "ORDER BY" in statement and "LIMIT 50" not in statement and "count DESC" not in statement
    answer(gateway, statement)  # the first read of a text fills the cache; the next one is served from it
    checked = False
    for _ in range(30):
        before = answer(direct, statement)
        hits = handler.hits
        served = answer(gateway, statement)
        hit = handler.hits > hits
        after = answer(direct, statement)
        if same(before, after, ordered):
            assert same(served, before, ordered), f"{statement}\ngateway: {served}\nspark:   {before}"
            checked = True
            if hit:
                return True
        time.sleep(0.2)
    assert checked, f"{statement}: state kept changing between reads"
    return False


def finish(server, db: str, table: str, error: str | None = None) -> None:
    """A coordinator commit as a round's end makes it (Tiered, or Failed with an error)."""

    def change(states, now):
        state = next(s for s in states.values() if s.path == f"{db}.{table}")
        state.tiering_epoch += 1
        if error is None:
            state.last_tiered_time = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
        else:
            state.last_error, state.last_error_time = error, now
        return None, True, []

    server.coordinator.mutate(change)


def test_sys_reads_are_answered_like_spark(server, hive_cursor, direct):
    handler = server.gateway.handler.by_name["sys-read"]  # the sys read route
    db = "sr_" + uuid.uuid4().hex[:6]
    run(hive_cursor, f"CREATE DATABASE {db}")
    corpus = [q.replace("{db}", db) for q in CORPUS]
    assert len(corpus) >= 40
    for q in corpus:
        assert verdict_of(server, q) == "sys-read", q
    for q in NOT_CACHED:
        assert verdict_of(server, q) != "sys-read", q
    cached = 0
    for i, statement in enumerate(corpus):
        if i % 4 == 0:  # register a table: its row must show in the very next reads
            run(hive_cursor, f"CREATE TABLE {db}.t{i} (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')")
        elif i % 4 == 2:
            finish(server, db, f"t{i - 2}", error="boom: disk full" if i % 8 == 2 else None)
        cached += compare(hive_cursor, direct, handler, statement)
    assert cached > len(corpus) // 2, (cached, len(corpus))  # checked answers were served from the cache
    for statement in NOT_CACHED:
        types, _ = answer(hive_cursor, statement)
        assert types == answer(direct, statement)[0]


def test_a_state_change_shows_in_the_very_next_status_query(server, hive_cursor):
    db = "sr_" + uuid.uuid4().hex[:6]
    query = f"SELECT table_name, status, tiering_epoch, last_error FROM sys.lake_tiering_status " \
            f"WHERE database_name = '{db}'"
    run(hive_cursor, f"CREATE DATABASE {db}")
    assert run(hive_cursor, query) == []
    assert run(hive_cursor, query) == []  # now cached
    run(hive_cursor, f"CREATE TABLE {db}.a (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')")
    (row,) = run(hive_cursor, query)
    assert row[0] == "a"
    epoch = row[2]
    finish(server, db, "a", error="boom")
    (row,) = run(hive_cursor, query)
    assert row[0] == "a" and row[2] >= epoch + 1 and row[3] == "boom"
    run(hive_cursor, f"CALL sys.disable_tiering('{db}.a')")
    assert run(hive_cursor, query) == []


def test_a_session_with_settings_reads_through_spark(server, hive_cursor):
    handler = server.gateway.handler.by_name["sys-read"]  # the sys read route
    query = "SELECT count(*) AS n FROM sys.lake_tiering_status"
    run(hive_cursor, query)
    hive_cursor.execute("SET spark.sql.session.timeZone=America/New_York")
    hits, misses = handler.hits, handler.misses
    for _ in range(3):
        run(hive_cursor, query)
    assert (handler.hits, handler.misses) == (hits, misses)  # relayed to Spark, not from the cache


def test_beeline_gets_a_cached_status_read(server, beeline):
    query = "SELECT status AS status, count(*) AS count FROM sys.lake_tiering_status GROUP BY status " \
            "ORDER BY count DESC LIMIT 10000"
    handler = server.gateway.handler.by_name["sys-read"]  # the sys read route
    assert verdict_of(server, query) == "sys-read"
    hits = handler.hits
    result = beeline.run(f"{query};\n{query};\n{query};\nSELECT count(*) AS n FROM sys.procedures;\n")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines.count("status,count") == 3 and "n" in lines
    assert handler.hits > hits
