"""Python values that stand for SQL constructors.

A ``CALL`` argument written as ``map(k, v, ...)`` parses to a :class:`SqlMap`
and one written as ``named_struct('f', v, ...)`` to a :class:`SqlStruct`;
:func:`tierlake.sql.sql_literal` turns them back into that SQL. They live here,
not with the procedures, because ``tierlake.sql`` imports nothing from the
engine. Their one definition is the client distribution's (a CALL built by
``tierlake_client`` and one built here quote the same way).
"""

from __future__ import annotations

from tierlake_client.sqltext import SqlMap, SqlStruct

__all__ = ["SqlMap", "SqlStruct"]
