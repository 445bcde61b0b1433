"""``DROP TABLE`` and ``ALTER TABLE … RENAME TO`` of a tiered table that has a
fresh view (docs/tiering.md, "Fresh views"): the gateway runs the statement,
then drops the view or re-creates it under the new name.

Only statements naming the table as ``db.table`` are taken: an unqualified
name may be a session's temporary view, which only the relayed session knows.
Any other DROP or RENAME goes to Spark unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.catalog.tiered_tables import lake_of
from tierlake.server.changelog import fresh_view
from tierlake.server.runtime.session import iceberg_table


@dataclass(frozen=True)
class TableChange:
    table: TablePath
    renamed_to: TablePath | None  # None: DROP TABLE


def _path(table: exp.Table) -> TablePath | None:
    parts = [p.name for p in table.parts]
    if len(parts) == 3 and parts[0].lower() == "spark_catalog":
        parts = parts[1:]
    return TablePath(parts[0].lower(), parts[1].lower()) if len(parts) == 2 else None


def parse_table_change(statement: str) -> TableChange | None:
    """``DROP TABLE db.t`` or ``ALTER TABLE db.t RENAME TO db2.t2``; None for anything else."""
    lowered = statement.lower()
    if not (("drop" in lowered and "table" in lowered) or "rename" in lowered):
        return None
    try:
        tree = sqlglot.parse_one(statement, read="spark")
    except (ParseError, TokenError):
        return None
    if isinstance(tree, exp.Drop) and (tree.args.get("kind") or "").upper() == "TABLE":
        tables = tree.args.get("tables") or ([tree.this] if isinstance(tree.this, exp.Table) else [])
        path = _path(tables[0]) if len(tables) == 1 else None
        return None if path is None else TableChange(path, None)
    if isinstance(tree, exp.Alter) and (tree.args.get("kind") or "").upper() == "TABLE":
        actions = tree.args.get("actions") or []
        if len(actions) == 1 and isinstance(actions[0], exp.AlterRename):
            source, target = _path(tree.this), _path(actions[0].this)
            if source is not None and target is not None:
                return TableChange(source, target)
    return None


def has_fresh_view(spark: Any, table: TablePath) -> bool:
    """The table exists and names a fresh view (a cheap metadata read, only for DROP/RENAME statements)."""
    try:
        return fresh_view.view_of(spark, table) is not None
    except Exception:  # noqa: BLE001 - not an Iceberg table, or no such table: Spark answers the statement
        return False


def run_table_change(spark: Any, config: Any, change: TableChange, statement: str) -> None:
    """Run ``statement``, then drop the fresh view, or move it with the renamed table."""
    props = {str(k): str(v) for k, v in dict(iceberg_table(spark, change.table.quoted).properties()).items()}
    view = fresh_view.view_of(spark, change.table)
    spark.sql(statement)
    if view is not None:
        fresh_view.drop_view(spark, view)
    if change.renamed_to is not None:
        # The lake table keeps its name (the stream table's property says which it is).
        fresh_view.create(spark, config, change.renamed_to, lake_of(config, change.table, props))
