"""The SQL of tierlake, as files: ``schema/`` migrations, ``views/``,
``templates/`` (jinja2) and ``queries/`` (parameterised statements).

Identifiers reach templates only through the ``ident``/``table`` filters
(quoted by sqlglot); values never reach them: they are bound through Spark's
named parameter markers (``:name``) when the statement runs.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from tierlake.sql.values import SqlMap

SQL_DIR = Path(__file__).resolve().parent
DIALECT = "spark"


def quote_ident(name: str) -> str:
    """A safely quoted Spark identifier (backticks, embedded ones doubled)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"invalid identifier {name!r}")
    return exp.to_identifier(name, quoted=True).sql(dialect=DIALECT)


def quote_table(*parts: str) -> str:
    """``db``, ``table`` → ```db`.`table```."""
    return ".".join(quote_ident(p) for p in parts)


def sql_literal(value) -> str:
    """A Python value as a Spark SQL literal, quoted by sqlglot.

    Only for statements that must travel as text (CALLs over JDBC, which has
    no bind parameters); dicts become ``named_struct``, ``SqlMap`` ``map``.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return exp.Literal.string(value).sql(dialect=DIALECT)
    if isinstance(value, (list, tuple)):
        return "array(" + ", ".join(sql_literal(v) for v in value) + ")"
    if isinstance(value, SqlMap):
        return "map(" + ", ".join(f"{sql_literal(k)}, {sql_literal(v)}" for k, v in value.items()) + ")"
    if isinstance(value, dict):
        return "named_struct(" + ", ".join(f"{sql_literal(str(k))}, {sql_literal(v)}" for k, v in value.items()) + ")"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def sql_name(name: str) -> str:
    """A plain (unquoted) name such as a procedure or parameter name."""
    import re

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"invalid name {name!r}")
    return name


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
