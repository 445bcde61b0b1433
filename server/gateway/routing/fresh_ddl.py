"""Recognising ``DROP TABLE`` and ``ALTER TABLE … RENAME TO`` of a tiered table
(or one that has a fresh view; docs/tiering.md, "Fresh views"): the gateway
hands such a statement to the engine (server/tiering/ddl.py, ``change``), which
runs it, then drops the view or re-creates it under the new name, and removes
the table's registration or moves it to the new name.

What the statement is comes from Spark's own parse, the one the gateway made
for it in the client's session, and that plan is what runs (a second parser
could read ``/* /*+ */ SELECT 1 -- */ DROP TABLE d.t`` as a DROP while Spark
runs a SELECT: docs/security.md). Only statements
naming the table as ``db.table`` are taken: an unqualified name may be a
session's temporary view, which only the relayed session knows. Any other
DROP or RENAME goes to Spark unchanged.
"""

from __future__ import annotations

from typing import Any

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.tiering.ddl import ColumnChange, TableChange

SESSION_CATALOG = "spark_catalog"
DROP, RENAME = "DropTable", "RenameTable"  # Spark's plan classes
# ALTER TABLE … ADD/DROP/RENAME/ALTER/REPLACE COLUMN(S): the fresh view names the stream's columns.
COLUMN_ROOTS = frozenset({"AddColumns", "DropColumns", "RenameColumn", "AlterColumn", "ReplaceColumns"})


def _path(parts: list[str]) -> TablePath | None:
    if len(parts) == 3 and parts[0].lower() == SESSION_CATALOG:
        parts = parts[1:]
    return TablePath(parts[0].lower(), parts[1].lower()) if len(parts) == 2 else None


def may_change_table(statement: str) -> bool:
    """A cheap superset of the statements :func:`table_change_of` takes
    (only these are parsed)."""
    lowered = statement.lower()
    return ("drop" in lowered and "table" in lowered) or "rename" in lowered


def table_change(root: str, name: list[str], new_name: list[str] | None = None) -> TableChange | None:
    """The change a plan rooted at ``root`` (a Spark plan class) makes to
    table ``name``; None for anything but a qualified DROP TABLE or RENAME."""
    source = _path(name)
    if source is None:
        return None
    if root == DROP:
        return TableChange(source, None)
    if root == RENAME and new_name is not None:
        target = _path(new_name)
        return None if target is None else TableChange(source, target)
    return None


def _parts(seq: Any) -> list[str]:
    return [str(seq.apply(i)) for i in range(seq.length())]


def table_change_of(plan: Any) -> TableChange | None:
    """What the statement whose parse is ``plan`` (Spark's Java plan) drops or renames; None for anything
    else."""
    if plan is None:
        return None
    root = str(plan.getClass().getSimpleName())
    if root == DROP:
        child = plan.child()
        # IDENTIFIER('…') is a PlanWithUnresolvedIdentifier: relayed.
        if str(child.getClass().getSimpleName()) != "UnresolvedIdentifier":
            return None
        return table_change(root, _parts(child.nameParts()))
    if root == RENAME and not plan.isView():
        child = plan.child()
        if str(child.getClass().getSimpleName()) != "UnresolvedTableOrView":
            return None
        return table_change(root, _parts(child.multipartIdentifier()), _parts(plan.newName()))
    return None


def may_change_columns(statement: str) -> bool:
    """A cheap superset of the statements :func:`column_change_of` takes."""
    lowered = statement.lower()
    return "alter" in lowered and "column" in lowered


def column_change_of(plan: Any) -> ColumnChange | None:
    """The table whose columns the statement whose parse is ``plan`` changes; None for anything else or
    an unqualified name."""
    if plan is None or str(plan.getClass().getSimpleName()) not in COLUMN_ROOTS:
        return None
    child = plan.table()
    if str(child.getClass().getSimpleName()) != "UnresolvedTable":
        return None
    path = _path(_parts(child.multipartIdentifier()))
    return None if path is None else ColumnChange(path)
