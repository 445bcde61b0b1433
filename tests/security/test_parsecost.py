"""Iceberg's parser normalises every statement with java.util.regex before
any grammar runs (``--.*?\\n``, ``\\s+``, ``/\\*.*?\\*/``); a long line full of
``--`` or of ``/*`` without ``*/`` makes that quadratic. The gateway counts
the regexes' steps in one linear pass and refuses such a statement before a
parser sees it; ordinary statements, however large, pass. No JVM: the count
is checked against a character-by-character model of the two searches."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlake.server.exceptions import StatementTooLargeError
from tierlake.server.gateway.auth import parsecost
from tierlake.server.gateway.auth.authz import Authorizer

_STOPS = "\n\r\u0085\u2028\u2029"


def _model_line(text: str) -> tuple[int, str]:
    """replaceAll("--.*?\\n", " ") attempt by attempt: (characters stepped over, result)."""
    i, steps, out, kept = 0, 0, [], 0
    while i < len(text):
        if text.startswith("--", i):
            j = i + 2
            while j < len(text) and text[j] not in _STOPS:
                j += 1
            if j < len(text) and text[j] == "\n":
                steps += j + 1 - i
                out += [text[kept:i], " "]
                i = kept = j + 1
                continue
            steps += j - i
        i += 1
    return steps, "".join(out) + text[kept:]


def _model_block(text: str) -> int:
    i, steps = 0, 0
    while i < len(text):
        if text.startswith("/*", i):
            j = i + 2
            while j < len(text) and text[j] not in _STOPS[2:] and not text.startswith("*/", j):
                j += 1
            if text.startswith("*/", j):
                steps, i = steps + j + 2 - i, j + 2
                continue
            steps += j - i
        i += 1
    return steps


def model(text: str) -> int:
    first, rest = _model_line(text.lower().strip())
    spaced = rest.translate(str.maketrans({c: " " for c in "\t\n\x0b\f\r"}))
    return first + _model_block(" ".join(p for p in spaced.split(" ") if p))


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.sampled_from(["-", "-", "a", "\n", "\r", " ", "/", "*", "\u2028", "'"]), max_size=80))
def test_the_count_is_the_model_or_an_upper_bound_of_it(text):
    counted = parsecost.steps(text, 10**12)
    assert counted >= model(text)
    lowered = text.lower().strip()
    if "/*" in lowered or any(c in lowered for c in _STOPS[1:]):
        assert counted == model(text)
    assert counted <= len(lowered) + model(text)  # the fast path adds at most one step a character


@pytest.mark.parametrize("text", [
    "SELECT 1 " + "-" * (1 << 19),             # one line of dashes: 10^11 steps
    "SELECT 1 " + "--x" * 300_000,
    "/* " * 300_000 + "SELECT 1",                # no */ anywhere
    "/* --*/\n" * 100_000 + "SELECT 1",          # the */ are inside -- comments, gone before /* is searched
    "SELECT 1 " + "-" * 200_000 + "\r\nFROM t",  # '.' stops at \r: every "--" fails there
])
def test_quadratic_shapes_are_refused_quickly(text):
    started = time.perf_counter()
    assert parsecost.steps(text) > parsecost.MAX_STEPS
    assert time.perf_counter() - started < 2.0  # linear: a quadratic count would take hours
    with pytest.raises(StatementTooLargeError, match="quadratic"):
        Authorizer(None).check("anyone", text)  # development mode too: Spark's Thrift Server parses it as well


@pytest.mark.parametrize("text", [
    "SELECT " + ", ".join(f"c{i} + 1 AS a{i}" for i in range(40_000)) + " FROM t",
    "SELECT 1 -- a comment\n" * 40_000,
    "/* a comment */ SELECT 1\r\n" * 30_000,
    "SELECT '" + "-" * 500_000 + "' AS d\nFROM t",  # dashes in a literal, on a line that ends
    "SELECT 1 -- " + "x" * 900_000,               # one comment to the end
])
def test_ordinary_statements_pass(text):
    started = time.perf_counter()
    assert parsecost.steps(text) <= parsecost.MAX_STEPS
    assert time.perf_counter() - started < 2.0  # linear: a quadratic count would take hours
    Authorizer(None, max_statement_size=2 << 20).check("anyone", text)


def _model_depth(text: str) -> int:
    """Spark's lexer, a character at a time: how deep brackets nest outside
    literals, quoted names and comments (/* */ nests; a hint is read)."""
    i, depth, deepest = 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif ch == "`":
            j = i + 1
            while j < len(text) and not (text[j] == "`" and text[j + 1:j + 2] != "`"):
                j += 2 if text[j] == "`" else 1
            i = j + 1
        elif text.startswith("--", i):
            while i < len(text) and text[i] not in "\n\r":
                i += 1
        elif text.startswith("/*", i) and not text.startswith("/*+", i):
            level, i = 1, i + 2
            while i < len(text) and level:
                if text.startswith("*/", i):
                    level, i = level - 1, i + 2
                elif text.startswith("/*", i) and not text.startswith("/*+", i):
                    level, i = level + 1, i + 2
                else:
                    i += 1
        else:
            if ch in "([":
                depth += 1
                deepest = max(deepest, depth)
            elif ch in ")]":
                depth -= 1
            i += 1
    return deepest


_PIECES = st.sampled_from(["(", ")", "[", "]", "((((((((", "))))))))", "'", "\"", "`", "``", "\\", "--", "\n",
                           "\r", "/*", "*/", "/*+", " x ", "'(('", "-- ((((\n", "/* (((( */"])


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(_PIECES, max_size=120), st.integers(min_value=0, max_value=200))
def test_the_nesting_bound_never_lets_deeper_text_through(pieces, extra):
    text = "SELECT " + "".join(pieces) + "(" * extra
    if _model_depth(text) > parsecost.MAX_NESTING:
        assert parsecost.nesting(text) > parsecost.MAX_NESTING


@pytest.mark.parametrize("text,refused", [
    ("SELECT " + "(" * 129 + "1" + ")" * 129, True),
    ("SELECT " + "(" * 128 + "1" + ")" * 128, False),
    ("SELECT " + "abs(" * 3000 + "1" + ")" * 3000, True),
    ("SELECT /*+ REPARTITION" + "(" * 200 + "1" + ")" * 200 + " */ 1", True),  # Spark parses hints
    ("SELECT '" + "(" * 3000 + "'", False),
    ("SELECT 1 -- " + "(" * 3000, False),
    ("SELECT 1 /* " + "(" * 3000 + " */", False),
    ("SELECT `" + "(" * 3000 + "`", False),
    ("INSERT INTO t VALUES " + ", ".join("(1, 'a(', array(2))" for _ in range(20_000)), False),
])
def test_statements_nested_too_deep_are_too_complex(text, refused):
    from tierlake.server.exceptions import StatementTooComplexError

    if refused:
        with pytest.raises(StatementTooComplexError) as info:
            Authorizer(None, max_statement_size=2 << 20).check("anyone", text)
        assert info.value.sqlstate == "54001"
        assert info.value.message.startswith("statement too complex: parentheses nested more than 128 deep")
    else:
        Authorizer(None, max_statement_size=2 << 20).check("anyone", text)
