"""What the Superset engine spec decides about a statement, without Superset.

Kept apart from :mod:`tierlake_client.superset.engine_spec` (which imports
Superset, and Superset wants an initialised app to be imported) so that the
rules are unit-tested with only sqlglot and PyHive.

- :func:`spark_change`: statements that change state which sqlglot's parse,
  and so Superset's DML guard, does not count as DDL/DML (``LOAD DATA``,
  ``ANALYZE TABLE``, ``MSCK REPAIR TABLE``, ``ADD JAR``, ``CACHE TABLE … AS
  SELECT``, ``REFRESH``);
- :func:`without_result_set`: a statement whose answer has no rows to fetch
  (Spark's Thrift Server describes DDL and writes as one ``Result`` column and
  then answers the fetch with a row set PyHive cannot decode);
- :func:`connection_error_text`: the reason of a failed connection, out of the
  wrapper Superset's connection test puts around it.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from sqlglot.tokens import TokenType

# Leading words (upper case, as sqlglot's tokens give them, split on blanks) → what it is.
_CHANGES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("LOAD", "DATA"), "LOAD DATA"),
    (("ANALYZE",), "ANALYZE TABLE"),
    (("MSCK",), "MSCK REPAIR TABLE"),
    (("REPAIR", "TABLE"), "REPAIR TABLE"),
    (("ADD", "JAR"), "ADD JAR"),
    (("ADD", "JARS"), "ADD JAR"),
    (("ADD", "FILE"), "ADD FILE"),
    (("ADD", "FILES"), "ADD FILE"),
    (("ADD", "ARCHIVE"), "ADD ARCHIVE"),
    (("ADD", "ARCHIVES"), "ADD ARCHIVE"),
    (("REFRESH",), "REFRESH"),
)
# CACHE [LAZY] TABLE t [OPTIONS (…)] [AS] query: the query's first token (AS is optional).
_QUERY_START = frozenset({TokenType.ALIAS, TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.FROM})
_COMMENTS = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)


def spark_change(statement: str) -> str | None:
    """The kind of a Spark statement that changes tables, files or the
    session's classpath although sqlglot does not parse it as DDL or DML
    (``"LOAD DATA"``, ``"ANALYZE TABLE"``, ``"MSCK REPAIR TABLE"``, ``"ADD JAR"``,
    ``"CACHE TABLE … AS SELECT"``, ``"REFRESH"``, …), else ``None``.

    Comments and case do not matter; a ``CACHE TABLE`` of an existing table
    (no query) only caches and is not a change."""
    try:
        tokens = sqlglot.tokenize(statement, read="spark")
    except sqlglot.errors.SqlglotError:
        tokens = None
    if tokens is not None:
        # sqlglot keeps a command's words together ("MSCK REPAIR", "ADD JAR"): split them again.
        words = " ".join(t.text for t in tokens[:4] if t.token_type != TokenType.STRING).upper().split()
        cache_as = bool(tokens) and tokens[0].text.upper() == "CACHE" and any(
            t.token_type in _QUERY_START for t in tokens)
    else:  # untokenisable (an open quote): its first words, comments skipped
        text = statement[_COMMENTS.match(statement).end():]
        words = text.upper().split()[:4]
        cache_as = bool(words) and words[0] == "CACHE" and re.search(
            r"\b(?:AS|SELECT|WITH|VALUES|FROM)\b", text, re.IGNORECASE) is not None
    if cache_as:
        return "CACHE TABLE … AS SELECT"
    for leading, kind in _CHANGES:
        if tuple(words[:len(leading)]) == leading:
            return kind
    return None


def without_result_set(cursor: Any) -> bool:
    """True when ``cursor``'s statement answered no rows to fetch: no
    description, or Spark's one ``Result`` column of DDL and writes."""
    description = getattr(cursor, "description", None)
    return not description or [d[0] for d in description] == ["Result"]


def connection_error_text(ex: BaseException) -> str | None:
    """The reason inside Superset's connection-test wrapper, or None.

    Superset's test connection turns any failure of its ping into
    ``DBAPIError(str(ex), None, None)``: the reason is the wrapper's
    ``statement`` and its text starts with ``(builtins.NoneType) None``."""
    if getattr(ex, "orig", "") is None and isinstance(getattr(ex, "statement", None), str):
        return ex.statement.strip() or None
    return None
