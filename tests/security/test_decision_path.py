"""After authorisation, what the gateway answers itself is decided on the
authoriser's parse, with no second parser over the client's text: a query
of any size, whatever words it holds, is neither tokenized nor parsed by
sqlglot nor parsed by Spark again; ``CALL sys.…`` is found by a bounded look
at the statement's start. No JVM: Spark's parser is stood in for."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import sqlglot

from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.auth.callparse import CALL_PREFIX_LIMIT, is_sys_call
from tierlake.server.gateway.routing.handler import CallHandler
from tierlake.server.gateway.routing.sys_reads import SysReads
from tierlake.server.gateway.transport.protocol import SessionInfo

LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
SESSION = SessionInfo("rita", b"s" * 16, 9, "127.0.0.1:1")


def huge_select(size: int = 1 << 20) -> str:
    """A query that holds every word the old text heuristics reacted to."""
    words = ("'create table x tblproperties (table.datalake.enabled = true)' AS create_it, "
             "'alter table x set tblproperties (table.datalake.freshness = 1)' AS alter_it, "
             "'drop table sys.t; call sys.v()' AS sys_it, ")
    cols, n, total = [], 0, len(words)
    while total < size - 64:
        cols.append(f"c{n} + 1 AS a{n}")
        total += len(cols[-1]) + 2
        n += 1
    return "SELECT " + words + ", ".join(cols) + " FROM shop.t"


def plan(root: str, *relations: tuple[str, ...]) -> planauth.Plan:
    lines = [f"N\t0\t-1\tP\t{LOGICAL}{root}"]
    for i, parts in enumerate(relations, start=1):
        lines += [f"N\t{i}\t0\tP\t{ANALYSIS}UnresolvedRelation", f"Q\t{i}\t" + "\t".join(parts)]
    return planauth.decode("\n".join(lines) + "\n")


class FakeSpark:
    """Spark's parser, answering one root class for every text; counts parses."""

    def __init__(self, root: str | None):
        self.root, self.parses = root, 0
        cls = SimpleNamespace(getSimpleName=lambda: self.root)
        parsed = SimpleNamespace(getClass=lambda: cls)
        parser = SimpleNamespace(parsePlan=self._parse)
        self._jsparkSession = SimpleNamespace(sessionState=lambda: SimpleNamespace(sqlParser=lambda: parser))
        self._parsed = parsed

    def _parse(self, text):
        self.parses += 1
        if self.root is None:
            raise ValueError("does not parse")
        return self._parsed


@pytest.fixture(autouse=True)
def fake_parse(monkeypatch):
    """The running session's parse (PlanWalker.parse in the JVM) answered by the fake's parser."""
    from tierlake.server.gateway.routing import fresh_ddl

    monkeypatch.setattr(fresh_ddl, "spark_parse",
                        lambda jsession, statement: jsession.sessionState().sqlParser().parsePlan(statement))


def handler(spark: FakeSpark) -> CallHandler:
    return CallHandler(registry=None, context_factory=lambda user: SimpleNamespace(spark=spark))


@pytest.fixture
def no_sqlglot(monkeypatch):
    """Fails the test when sqlglot tokenizes or parses anything."""
    def refuse(*args, **kwargs):
        raise AssertionError("sqlglot ran over the client's text")

    monkeypatch.setattr(sqlglot, "parse_one", refuse)
    monkeypatch.setattr(sqlglot.Dialect, "tokenize", refuse)
    monkeypatch.setattr(sqlglot.tokens.Tokenizer, "tokenize", refuse)


def test_a_query_the_authoriser_parsed_is_neither_reparsed_nor_read_by_sqlglot(no_sqlglot):
    text = huge_select()
    spark = FakeSpark("CreateTable")  # what a second parse would say: it must not be asked
    planauth.remember(text, plan("Project", ("shop", "t")))
    h = handler(spark)
    started = time.perf_counter()
    assert not h.wants(text) and not h.runs_ddl(text)
    assert time.perf_counter() - started < 0.5
    assert spark.parses == 0


@pytest.mark.parametrize("root", ["CreateTable", "SetTableProperties", "DropTable", "RenameTable"])
def test_ddl_needs_the_ddl_root_in_the_running_session_too(root):
    text = "CREATE TABLE d.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')"
    planauth.remember(text, plan(root))
    spark = FakeSpark("Project")  # the session that would run it reads a query: relayed
    assert not handler(spark).runs_ddl(text)
    assert spark.parses == 1


def test_a_tiered_create_both_parses_agree_on_is_taken():
    text = "CREATE TABLE d.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')"
    planauth.remember(text, plan("CreateTable"))
    assert handler(FakeSpark("CreateTable")).runs_ddl(text)
    alter = "ALTER TABLE d.t SET TBLPROPERTIES ('table.datalake.freshness'='1 s')"
    planauth.remember(alter, plan("SetTableProperties"))
    assert handler(FakeSpark("SetTableProperties")).runs_ddl(alter)


def test_without_the_authorisers_parse_spark_decides_before_sqlglot(no_sqlglot):
    # Development mode: no plan to recall. Spark's parse (one, in the JVM) says query: sqlglot never runs.
    text = huge_select()
    spark = FakeSpark("Project")
    assert not handler(spark).wants(text)
    assert spark.parses == 1
    plain = FakeSpark("Project")
    assert not handler(plain).wants("SELECT * FROM shop.t")  # no DDL word: not even parsed
    assert plain.parses == 0


def test_the_remembered_parse_is_this_threads_and_this_texts():
    text = "SELECT 1"
    planauth.remember(text, plan("Project"))
    assert planauth.recall(text) is not None
    assert planauth.recall("SELECT 2") is None
    seen = []
    thread = threading.Thread(target=lambda: seen.append(planauth.recall(text)))
    thread.start()
    thread.join()
    assert seen == [None]


def test_the_sys_read_cache_takes_the_authorisers_parse_of_a_big_query():
    class Reads(SysReads):
        def _parse_json(self, text):
            raise AssertionError("the plan was turned into JSON")

    reads = Reads(handler(FakeSpark(None)), spark=lambda: None, backend=lambda: ("127.0.0.1", 1, None))
    text = huge_select()
    planauth.remember(text, plan("Project", ("shop", "t"), ("sys", "lake_tiering_status")))
    assert not reads.wants_for(text, SESSION)


@pytest.mark.parametrize("statement, expected", [
    ("CALL sys.version()", True),
    ("call `SYS`.`version`()", True),
    ("/* a /* nested */ comment */ CALL sys.version()", True),
    ("/* /*+ */ CALL sys.version() -- */", True),  # a hint opener inside a comment is text
    ("-- a line\nCALL sys.version()", True),
    ("-- a line \\\nCALL sys.version()", False),  # `-- \` + newline: the CALL is comment
    ("/* unclosed CALL sys.version()", False),
    ("`call` sys.version()", False),
    ("CALL sysx.version()", False),
    ("SELECT 1 -- CALL sys.version()", False),
    (" " * (CALL_PREFIX_LIMIT + 1) + "CALL sys.version()", False),  # past the bounded look
])
def test_call_prefix(statement, expected):
    assert is_sys_call(statement) is expected


@pytest.mark.parametrize("text", [
    "/*" * (1 << 19), "/*" + "/*/" * 300_000, "-- \\\n" * 200_000, " " * (1 << 20), huge_select(),
])
def test_call_prefix_is_bounded(text, no_sqlglot):
    started = time.perf_counter()
    assert not is_sys_call(text)
    assert time.perf_counter() - started < 1.0
