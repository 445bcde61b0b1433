"""Statements typed line by line (server/clients/statements.py)."""

from __future__ import annotations

from tierlake.server.clients.statements import StatementBuffer


def feed_all(*lines: str) -> tuple[list[str], str]:
    buffer = StatementBuffer()
    out = []
    for line in lines:
        out.extend(buffer.feed(line))
    return out, buffer.rest()


def test_a_semicolon_ends_a_statement_across_lines():
    assert feed_all("SELECT 1", "  AS one;") == (["SELECT 1\n  AS one"], "")
    assert feed_all("SELECT 1; SELECT 2;", "SELECT 3") == (["SELECT 1", "SELECT 2"], "SELECT 3")


def test_semicolons_in_literals_names_and_comments_do_not_end_it():
    statements, rest = feed_all("SELECT ';' AS a, \"x;y\" AS `b;c` -- not ; the end", "FROM t;")
    assert statements == ["SELECT ';' AS a, \"x;y\" AS `b;c` \nFROM t"]
    assert rest == ""
    assert feed_all("SELECT 'it\\'s;' AS s;") == (["SELECT 'it\\'s;' AS s"], "")
    assert feed_all("SELECT 'open;", "still open';") == (["SELECT 'open;\nstill open'"], "")


def test_empty_statements_are_skipped():
    buffer = StatementBuffer()
    assert buffer.empty
    assert buffer.feed(";;  ;") == []
    assert buffer.feed("SELECT") == [] and not buffer.empty
