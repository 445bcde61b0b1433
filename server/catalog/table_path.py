"""Table names as users write them: ``db.t``, ```db`.`t```, ``t`` (current database); the table a
name resolves to (:func:`load_table`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from tierlake import sql
from tierlake.server.exceptions import InvalidIdentifierError
from tierlake.server.runtime.session import iceberg_table

SESSION_CATALOG = "spark_catalog"


@dataclass(frozen=True)
class TablePath:
    database: str
    table: str

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def quoted(self) -> str:
        return sql.quote_table(self.database, self.table)


def load_table(spark: Any, path: TablePath, locking: bool = False) -> Any:
    """The Iceberg ``Table`` (Java) at ``path``, loaded now (a metastore read and the metadata file).

    The one loader of a table by its path (``session.iceberg_table`` below it takes a name, for the
    ``sys`` tables named by text). ``locking``: through the catalog whose commits take metastore locks
    (``session.LOCKING_CATALOG``). A tiered table's round loads it once, through its handle
    (server/changelog/handle.py), and passes that down."""
    if locking:
        return iceberg_table(spark, path.quoted, locking=True)
    return iceberg_table(spark, path.quoted)


def coordinator_path(path: str) -> TablePath:
    """The table the coordinator names ``path``: ``<database>.<table>`` as it registered them, unquoted
    (database names hold no dot). Not a name a user wrote: a table named ``where`` or ``a/b`` is
    ``db.where``, which :func:`parse_table_path` would read as SQL and refuse (issue 50's harness)."""
    database, dot, table = str(path).partition(".")
    if not (database and dot and table):
        raise InvalidIdentifierError(f"invalid table name {path!r}: expected db.table")
    return TablePath(database, table)


def parse_table_path(text: str, default_database: str = "default") -> TablePath:
    """Parse and validate a table name; Hive stores names in lower case, so do we."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidIdentifierError("a table name must not be empty")
    if len(text) > 512:
        raise InvalidIdentifierError(f"table name too long ({len(text)} characters)")
    try:
        table = sqlglot.parse_one(text, read="spark", into=exp.Table)
    except (ParseError, TokenError):
        raise InvalidIdentifierError(f"invalid table name {text!r}: expected db.table") from None
    parts = [p.name for p in table.parts]
    if len(parts) == 3 and parts[0].lower() == SESSION_CATALOG:
        parts = parts[1:]
    if not 1 <= len(parts) <= 2 or any(not p for p in parts):
        raise InvalidIdentifierError(f"invalid table name {text!r}: expected db.table")
    for p in parts:
        if any(ord(c) < 32 for c in p):
            raise InvalidIdentifierError(f"invalid table name {text!r}: control characters are not allowed")
    if len(parts) == 1:
        parts = [default_database, parts[0]]
    return TablePath(parts[0].lower(), parts[1].lower())
