"""After authorisation, what the gateway answers itself is decided on the
authoriser's parse, with no second parser over the client's text: a query
of any size, whatever words it holds, is neither tokenized nor parsed by
sqlglot nor parsed by Spark again (every route reads the statement's one
parse); ``CALL sys.…`` is found by a bounded look
at the statement's start. No JVM: Spark's parser is stood in for."""

from __future__ import annotations

import time

import pytest
import sqlglot

from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.auth.callparse import CALL_PREFIX_LIMIT, is_sys_call
from tierlake.server.gateway.routing.handler import CallHandler, DdlHandler
from tierlake.server.gateway.routing.ingest import SessionSettings
from tierlake.server.gateway.routing.router import Router
from tierlake.server.gateway.routing.sys_reads import SysReads
from tierlake.server.gateway.transport.protocol import SessionInfo, Statement

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


class Parser:
    """Spark's parse in the client's session, stood in for: one plan for every text; counts parses."""

    def __init__(self, result: planauth.Plan | None):
        self.result, self.parses = result, 0

    def __call__(self, text: str) -> planauth.Plan:
        self.parses += 1
        if self.result is None:
            raise ValueError("does not parse")
        return self.result


class NoSpark:
    """A context whose Spark must not be touched (a table load would be a second look)."""

    @property
    def spark(self):
        raise AssertionError("the handler reached for Spark")


def router(reads: SysReads | None = None) -> Router:
    context = lambda user: NoSpark()  # noqa: E731
    routes = [SessionSettings(), CallHandler(registry=None, context_factory=context), DdlHandler(context)]
    return Router(routes + ([reads] if reads is not None else []))


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
    parser = Parser(plan("CreateTable"))  # what a second parse would say: it must not be asked
    statement = Statement(text, SESSION, parse=parser)
    statement.authorised(plan("Project", ("shop", "t")))
    started = time.perf_counter()
    assert not router().route(statement)
    assert time.perf_counter() - started < 0.5
    assert parser.parses == 0 and statement.route is None


def test_tiered_ddl_is_taken_on_the_authorisers_parse_alone():
    text = "CREATE TABLE d.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')"
    parser = Parser(plan("Project"))  # a second parse would say query: it must not be asked
    statement = Statement(text, SESSION, parse=parser)
    statement.authorised(plan("CreateTable"))
    assert router().route(statement)
    assert (statement.route, statement.role, parser.parses) == ("ddl", "admin", 0)
    assert statement.prepared.table.quoted == "`d`.`t`"
    alter = Statement("ALTER TABLE d.t SET TBLPROPERTIES ('table.datalake.freshness'='1 s')", SESSION, parse=parser)
    alter.authorised(plan("SetTableProperties"))
    assert router().route(alter) and alter.route == "ddl" and alter.prepared.properties
    query = Statement(text, SESSION, parse=parser)  # the same text, parsed by the authoriser as a query
    query.authorised(plan("Project"))
    assert not router().route(query)
    assert parser.parses == 0


def test_without_the_authorisers_parse_spark_decides_before_sqlglot(no_sqlglot):
    # Development mode: nothing parsed the statement. Spark's parse (one, in the JVM) says query: sqlglot never runs.
    parser = Parser(plan("Project"))
    assert not router().route(Statement(huge_select(), SESSION, parse=parser))
    assert parser.parses == 1
    plain = Parser(plan("Project"))
    assert not router().route(Statement("SELECT * FROM shop.t", SESSION, parse=plain))  # no DDL word: not parsed
    assert plain.parses == 0


def test_every_route_reads_the_one_parse():
    # A text that every route's cheap test lets through: the first route that needs a parse makes it,
    # the others read it.
    text = "SET x = 'create table t tblproperties (table.datalake.enabled) alter column insert sys'"
    parser = Parser(plan("SetCommand"))
    reads = SysReads(spark=lambda: None, backend=lambda: ("127.0.0.1", 1, None))
    assert not router(reads).route(Statement(text, SESSION, parse=parser))
    assert parser.parses == 1


def test_a_statement_that_does_not_parse_is_parsed_once_and_relayed():
    parser = Parser(None)
    statement = Statement("INSERT INTO sys.x SET create alter column", SESSION, parse=parser)
    assert not router().route(statement)
    assert statement.parsed() is None and statement.plan is None
    assert parser.parses == 1


def test_the_sys_read_cache_takes_the_authorisers_parse_of_a_big_query():
    class Reads(SysReads):
        def _parse_json(self, text):
            raise AssertionError("the statement was parsed again")

    reads = Reads(spark=lambda: None, backend=lambda: ("127.0.0.1", 1, None))
    statement = Statement(huge_select(), SESSION, parse=Parser(None))
    statement.authorised(plan("Project", ("shop", "t"), ("sys", "lake_tiering_status")))
    assert not reads.claim(statement)


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
