"""Spark SQL text that has to travel as text: quoted identifiers and literals.

HiveServer2 has no bind parameters, so a ``CALL`` sent by a client carries
its values as literals. Quoting is sqlglot's (Spark dialect), the one
implementation the server's templates use too (``tierlake.sql`` imports it
from here).
"""

from __future__ import annotations

import re

from sqlglot import exp

DIALECT = "spark"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SqlMap(dict):
    """A value written as ``map(k, v, ...)`` in a CALL."""


class SqlStruct(dict):
    """A value written as ``named_struct('f', v, ...)`` in a CALL."""


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

    Dicts become ``named_struct``, :class:`SqlMap` ``map``, lists ``array``.
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
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"invalid name {name!r}")
    return name


def call_statement(procedure: str, arguments: dict) -> str:
    """``CALL sys.<procedure>(name => literal, ...)``: names checked, values quoted."""
    args = ", ".join(f"{sql_name(k)} => {sql_literal(v)}" for k, v in arguments.items())
    return f"CALL sys.{sql_name(procedure)}({args})"
