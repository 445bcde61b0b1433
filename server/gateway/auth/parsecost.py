"""The work Iceberg's parser does on a statement before any grammar runs.

Every statement is parsed by Iceberg's SQL extensions parser (the server's
``spark.sql.extensions``): in the gateway's authorisation, and again in the
Spark Thrift Server. Before parsing it normalises the text with
``java.util.regex`` (``IcebergSparkSqlExtensionsParser.isIcebergCommand``,
Iceberg 1.10)::

    lower/trim → replaceAll("--.*?\\n", " ") → replaceAll("\\s+", " ") → replaceAll("/\\*.*?\\*/", " ") → …

A lazy ``.*?`` that finds no end before a line terminator (``.`` stops at
``\\r``, ``\\u0085``, ``\\u2028``, ``\\u2029``, and at the end) fails, and
the search tries again one character further. So a long line full of ``--``
without a newline after it, or full of ``/*`` without a ``*/``, costs time
quadratic in its length: 128 KiB of ``-`` keep a core busy for ~50 s, 1 MiB
for most of an hour, in the JVM, twice. :func:`steps` counts, in one pass
that never looks at a character twice, how many characters those two
searches step over; the gateway refuses a statement above
:data:`MAX_STEPS` before any parser sees it. Ordinary statements, however
large, are far below: a match consumes what it spans, so only failing
searches add up.
"""

from __future__ import annotations

import re
from itertools import accumulate

# ~6 ns a step measured with java.util.regex: about half a second of a core.
MAX_STEPS = 100_000_000
# What java.util.regex's ``.`` does not match (no DOTALL, no UNIX_LINES).
_DOT_STOPS = ("\n", "\r", "\u0085", "\u2028", "\u2029")
_DOT_STOPS_AFTER_SPACES = ("\u0085", "\u2028", "\u2029")  # \n and \r became spaces


class _Next:
    """The next position of any of ``chars`` at or after a position, each
    character's search resumed, never repeated: linear over all calls made
    with positions that do not decrease."""

    def __init__(self, text: str, chars: tuple[str, ...]):
        self.text = text
        self.found = {c: -1 for c in chars}  # -1: not searched yet

    def at(self, i: int) -> int:
        best = len(self.text)
        for c, pos in self.found.items():
            if pos != len(self.text) and pos < i:
                pos = self.text.find(c, i)
                pos = len(self.text) if pos < 0 else pos
                self.found[c] = pos
            best = min(best, pos)
        return best


def _line_comments(text: str, budget: int) -> tuple[int, str]:
    """Steps of ``replaceAll("--.*?\n", " ")`` (counting stops soon after
    ``budget``) and the text it leaves."""
    stops, steps, i, kept, out = _Next(text, _DOT_STOPS), 0, 0, 0, []
    while steps <= budget:
        p = text.find("--", i)
        if p < 0:
            break
        end = stops.at(p + 2)
        if end < len(text) and text[end] == "\n":
            steps += end + 1 - p  # a match: replaced, the search goes on after it
            out += [text[kept:p], " "]
            i = kept = end + 1
            continue
        # Every "--" from here to ``end`` fails, each after stepping to ``end``:
        # a run of dashes at once (its overlapping "--" positions p..q-2).
        q = p + 2
        while q < end:  # the run's end, a chunk at a time (C speed, no character twice)
            chunk = text[q:min(end, q + 4096)]
            q += len(chunk) - len(chunk.lstrip("-"))
            if len(chunk) == 0 or chunk[-1] != "-" or q < end and text[q] != "-":
                break
        steps += (end - p + end - (q - 2)) * (q - 1 - p) // 2
        i = q - 1
    out.append(text[kept:])
    return steps, "".join(out)


def _block_comment_steps(text: str, budget: int) -> int:
    """Steps of ``replaceAll("/\\*.*?\\*/", " ")``; stops counting soon after ``budget``."""
    stops, steps, i, close = _Next(text, _DOT_STOPS_AFTER_SPACES), 0, 0, -1
    while steps <= budget:
        p = text.find("/*", i)
        if p < 0:
            break
        if close != len(text) and close < p + 2:
            close = text.find("*/", p + 2)
            close = len(text) if close < 0 else close
        end = stops.at(p + 2)
        if close < end:
            steps += close + 2 - p
            i = close + 2
        else:
            steps += end - p
            i = p + 1
    return steps


_SPACES = str.maketrans({c: " " for c in "\t\n\x0b\f\r"})  # java.util.regex's \s


def steps(text: str, budget: int = MAX_STEPS) -> int:
    """About how many characters Iceberg's normalisation steps over for
    ``text``; the count stops soon after it passes ``budget``."""
    lowered = text.lower().strip()
    if "/*" not in lowered and not any(c in lowered for c in _DOT_STOPS[1:]):
        # Lines end in "\n" only: a "--" fails only after the last one, and matches step over each
        # character once at most. No per-line work for a statement of many commented lines.
        last = lowered.rfind("\n") + 1
        return len(lowered) + _line_comments(lowered[last:], budget)[0] if "--" in lowered else 0
    first, rest = _line_comments(lowered, budget) if "--" in lowered else (0, lowered)
    if "/*" not in rest:
        return first
    collapsed = " ".join(part for part in rest.translate(_SPACES).split(" ") if part)
    return first + _block_comment_steps(collapsed, budget - first)


# Deepest nesting of parentheses and brackets the gateway lets a parser see.
# Spark 3.5's parser ran out of stack at 200 nested subqueries and 400 nested
# function calls, and spent 2.6 s on 400 nested parentheses before answering
# (measured 2026-11-28); 3,000 cost 31.7 s, then a StackOverflowError.
MAX_NESTING = 128

# What Spark's lexer does not read as nesting: string literals, quoted names
# and comments (not hints: Spark parses a hint's arguments). Each of these
# matches at most what Spark's lexer takes as one token (a block comment ends
# at its first */ here, nested ones further on in Spark), so nothing is
# ever hidden from the count; an unclosed quote or comment is counted
# through, and Spark refuses it anyway.
_NOT_NESTING = re.compile(
    r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`]|``)*`|--[^\n\r]*|/\*(?!\+).*?\*/""", re.S)
_NOT_BRACKETS = re.compile(r"[^()\[\]]+")
_STEP = {"(": 1, "[": 1, ")": -1, "]": -1}


def nesting(text: str) -> int:
    """How deep ``(`` and ``[`` nest in ``text`` outside string literals,
    quoted names and comments (Spark's lexer rules): never less than the depth
    Spark's parser meets, and no more than :data:`MAX_NESTING` when that depth
    is within it (a text with few brackets answers their count). Two
    regular-expression passes at C speed, then one step per bracket."""
    opened = text.count("(") + text.count("[")
    if opened <= MAX_NESTING:
        return opened  # an upper bound that is already small enough
    brackets = _NOT_BRACKETS.sub("", _NOT_NESTING.sub(" ", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
