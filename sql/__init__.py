"""The SQL of tierlake, as files: ``schema/`` migrations, ``views/``,
``templates/`` (jinja2) and ``queries/`` (parameterised statements).

Identifiers reach templates only through the ``ident``/``table`` filters
(quoted by sqlglot). Values that vary with the data (positions, cut-off times,
a state table's rows, the database and table a query looks up) are bound
through Spark's named parameter markers (``:name``) when the statement runs,
not rendered.

Where a statement cannot take a parameter marker, a template renders the value
itself, and then only through a filter that makes it one SQL token:

- ``|literal`` (:func:`sql_literal`: a string quoted and escaped by sqlglot;
  ``None``, booleans and numbers as themselves) for

  - DDL clauses whose value becomes part of a table's or view's stored
    definition: ``LOCATION``, ``TBLPROPERTIES`` keys and values (the stream
    table's properties, already checked against the table-property registry,
    and the lake table's ``tierlake.stream-table``) and a view's ``COMMENT``
    (``create_stream_table``, ``create_lake_table``, ``fresh_view``);
  - constants of the code, the same in every statement and never input: the
    change types ``+I -U +U -D`` and the changelog rule's ``raise_error``
    message (``tiering_pk_winners``, ``changelog_check``);

- ``|int`` for numbers a stored view pins or a clause takes as a number
  (snapshot ids and positions of a fresh view, ``VERSION AS OF``, ``LIMIT``).

Column types (``c.type``) are Spark's own type strings of a schema it has
already parsed. ``tests/sql/test_templates.py`` keeps ``|literal`` to the
uses above.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2
import sqlglot
from sqlglot.tokens import TokenType

# Quoting is shared with the client distribution (one implementation).
from tierlake_client.sqltext import quote_ident, quote_table, sql_literal, sql_name

__all__ = ["quote_ident", "quote_table", "sql_literal", "sql_name", "render", "render_checked", "read",
           "split_statements", "files"]

SQL_DIR = Path(__file__).resolve().parent
DIALECT = "spark"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(SQL_DIR)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ident"] = quote_ident
    env.filters["literal"] = sql_literal
    env.filters["name"] = sql_name
    env.filters["table"] = lambda parts: quote_table(*parts) if isinstance(parts, (list, tuple)) else quote_table(parts)
    return env


def render(template: str, **context) -> str:
    """Render ``template`` (a path relative to ``sql/``)."""
    return environment().get_template(template).render(**context)


def render_checked(template: str, **context) -> str:
    """Render, then parse with sqlglot: a template bug is caught before Spark runs it."""
    from sqlglot.errors import ParseError, TokenError

    text = render(template, **context)
    try:
        sqlglot.parse_one(text, read=DIALECT)
    except (ParseError, TokenError) as e:
        raise ValueError(f"template {template} rendered invalid SQL: {str(e).splitlines()[0]}\n{text}") from None
    return text


def read(path: str) -> str:
    """The text of a plain SQL file under ``sql/``."""
    return (SQL_DIR / path).read_text(encoding="utf-8")


def split_statements(text: str) -> list[str]:
    """Split a SQL script on top-level semicolons (strings and comments respected)."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
    statements, start = [], 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            chunk = text[start : tok.start].strip()
            if chunk:
                statements.append(chunk)
            start = tok.end + 1
    tail = text[start:].strip()
    if tail and any(t.start >= start for t in tokens):
        statements.append(tail)
    return statements


def files(subdir: str, suffix: str = ".sql") -> list[Path]:
    """The files of ``sql/<subdir>`` in name order."""
    return sorted(p for p in (SQL_DIR / subdir).iterdir() if p.name.endswith(suffix))
