"""Python values that stand for SQL constructors.

A ``CALL`` argument written as ``map(k, v, ...)`` parses to a :class:`SqlMap`
and one written as ``named_struct('f', v, ...)`` to a :class:`SqlStruct`;
:func:`tierlake.sql.sql_literal` turns them back into that SQL. They live here,
not with the procedures, because ``tierlake.sql`` imports nothing from the
engine.
"""

from __future__ import annotations


class SqlMap(dict):
    """A value written as ``map(k, v, ...)`` in a CALL."""


class SqlStruct(dict):
    """A value written as ``named_struct('f', v, ...)`` in a CALL."""
