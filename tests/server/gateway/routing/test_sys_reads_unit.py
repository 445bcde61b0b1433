"""Classification of statements for the sys read cache, on plans Spark's own
parser produced (tests/fixtures/sys_reads/plans.json, ``LogicalPlan.toJSON``
of the unresolved plan), and the cache's freshness rules without a JVM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierlake.server.gateway.routing.handler import CallHandler
from tierlake.server.gateway.routing.router import Router
from tierlake.server.gateway.routing.sys_reads import CachedResult, SysReads, classify
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo, Statement
from tierlake.server.state import state_version

PLANS = json.loads((Path(__file__).parents[3] / "fixtures" / "sys_reads" / "plans.json").read_text())
BUILTINS = frozenset({"count", "now", "rand", "max"})


def verdict(statement: str):
    return classify(PLANS[statement], BUILTINS, lambda name: name != "lake_tiering_lag")


@pytest.mark.parametrize("statement", [
    "SELECT status AS status, count(*) AS count FROM sys.lake_tiering_status GROUP BY status "
    "ORDER BY count DESC LIMIT 10000",
    "WITH t AS (SELECT * FROM sys.lake_tiering_status) SELECT status, count(*) FROM t GROUP BY status",
    "SELECT s.table_name FROM sys.lake_tiering_status s JOIN spark_catalog.sys.tiering_rounds r "
    "ON r.table_name = s.table_name",
    "SELECT * FROM sys.lake_tiering_status WHERE EXISTS (SELECT 1 FROM sys.tiering_tables)",
])
def test_deterministic_reads_of_sys_are_cacheable(statement):
    assert verdict(statement).kind == "sys-read"


@pytest.mark.parametrize("statement", [
    "SELECT now() FROM sys.lake_tiering_status",
    "SELECT current_timestamp FROM sys.lake_tiering_status",   # a bare word Spark resolves to the clock
    "SELECT rand() FROM sys.lake_tiering_status",
    "SELECT tierlake_version() FROM sys.lake_tiering_status",  # not a built-in
    "SELECT * FROM sys.lake_tiering_lag",                      # a view over the clock
    "SELECT * FROM sys.tiering_tables.snapshots",              # Iceberg metadata, not sys state
    "SELECT * FROM lake_tiering_status",                       # depends on the current database
    "SELECT * FROM shop.orders JOIN sys.lake_tiering_status",
    "SELECT 1",
    "SELECT * FROM range(10)",
    "SELECT /*+ BROADCAST(s) */ * FROM sys.lake_tiering_status s",
    "SELECT * FROM csv.`/etc/passwd`",
])
def test_other_reads_go_to_spark(statement):
    assert verdict(statement).kind == "read"


def test_settings_and_writes():
    assert verdict("SET spark.sql.session.timeZone=UTC").kind == "settings"
    write = verdict("INSERT INTO sys.tiering_tables SELECT * FROM sys.tiering_tables")
    assert write.kind == "other" and write.names_sys
    assert verdict("DROP TABLE sys.tiering_backlog").names_sys
    user_write = verdict("INSERT INTO shop.orders VALUES (1)")
    assert user_write.kind == "other" and not user_write.names_sys


class _Reads(SysReads):
    """The cache with Spark replaced: each run answers a new result."""

    def __init__(self, **kw):
        super().__init__(spark=lambda: None, backend=lambda: ("127.0.0.1", 1, None), **kw)
        self.runs = 0
        self._views, self._builtins = {}, BUILTINS

    def _plan_json(self, statement):
        return PLANS.get(statement.text)

    def _run(self, statement, session=None):
        self.runs += 1
        return CachedResult([("n", "bigint")], [(self.runs,)], None)


Q = "SELECT status AS status, count(*) AS count FROM sys.lake_tiering_status GROUP BY status " \
    "ORDER BY count DESC LIMIT 10000"
SESSION = SessionInfo("u", b"g" * 16, 9, "127.0.0.1:1")


def test_a_sys_commit_makes_the_next_read_go_to_spark():
    reads = _Reads(max_age_s=60)
    assert reads.claim(Statement(Q, SESSION))
    assert reads.read(Q).rows == [(1,)] and reads.read(Q).rows == [(1,)]
    state_version.bump()
    assert reads.read(Q).rows == [(2,)]


def test_max_age_bounds_what_outside_writers_could_make_stale():
    reads = _Reads(max_age_s=0)
    assert reads.read(Q).rows == [(1,)] and reads.read(Q).rows == [(2,)]


def test_relayed_writes_of_sys_bump_the_version_and_settings_bypass():
    reads = _Reads(max_age_s=60)
    before = state_version.current()
    assert not reads.claim(Statement("INSERT INTO shop.orders VALUES (1)", SESSION))  # cannot name sys: not even parsed
    assert state_version.current() == before
    assert not reads.claim(Statement("DROP TABLE sys.tiering_backlog", SESSION))
    assert state_version.current() != before
    assert not reads.claim(Statement("SET spark.sql.session.timeZone=UTC", SESSION))
    assert not reads.claim(Statement(Q, SESSION))  # this session's results would render differently
    other = SessionInfo("u", b"h" * 16, 9, "127.0.0.1:1")
    assert reads.claim(Statement(Q, other))
    tz = ("set:hiveconf:spark.sql.session.timeZone",)
    assert not reads.claim(Statement(Q, SessionInfo("u", b"i" * 16, 9, "127.0.0.1:1", settings=tz)))
    jdbc = ("set:hiveconf:hive.server2.thrift.resultset.default.fetch.size",)  # every Hive JDBC connection
    assert reads.claim(Statement(Q, SessionInfo("u", b"j" * 16, 9, "127.0.0.1:1", settings=jdbc)))
    reads.session_closed(SESSION.session_guid)
    assert reads.claim(Statement(Q, SESSION))


def test_answers_computed_while_a_relayed_write_of_sys_may_run_are_not_kept():
    reads = _Reads(max_age_s=60)
    assert reads.read(Q).rows == [(1,)] and reads.read(Q).rows == [(1,)]
    assert not reads.claim(Statement("DELETE FROM sys.tiering_backlog WHERE table_id = 1", SESSION))
    # Spark may still be running the DELETE: each read goes to Spark until max-age has passed.
    assert [reads.read(Q).rows for _ in range(3)] == [[(2,)], [(3,)], [(4,)]]
    reads._uncached_until = 0.0  # max-age later
    assert reads.read(Q).rows == [(5,)] and reads.read(Q).rows == [(5,)]


def test_calls_go_to_the_call_route_before_the_cache_is_asked():
    reads = _Reads()
    router = Router([CallHandler(registry=None, context_factory=lambda user: None), reads])
    before = state_version.current()
    call = Statement("CALL sys.version()", SESSION)
    assert router.route(call) and call.route == "call"
    assert state_version.current() == before  # the cache never saw it (a CALL's commits bump the version)
    query = Statement(Q, SessionInfo("u", b"k" * 16, 9, "127.0.0.1:1"))
    assert router.route(query) and query.route == "sys-read"
    assert isinstance(router.execute(query), LocalResult)


def test_answers_are_kept_per_role():
    # A reader is served only what a reader's run produced (Spark checked it as a reader's, with its timeout).
    reads = _Reads(max_age_s=60)
    admin = SessionInfo("ann", b"a" * 16, 9, "127.0.0.1:1", role="admin")
    reader = SessionInfo("rita", b"r" * 16, 9, "127.0.0.1:1", role="reader")
    other_reader = SessionInfo("rob", b"o" * 16, 9, "127.0.0.1:1", role="reader")
    assert reads.read(Q, admin).rows == [(1,)] and reads.read(Q, admin).rows == [(1,)]
    assert reads.read(Q, reader).rows == [(2,)]
    assert reads.read(Q, other_reader).rows == [(2,)]
    assert reads.runs == 2
