"""Refuse a primary-key changelog that tiering would have to guess at.

The rule is enforced inside the primary-key MERGE (its winners,
``tiering_pk_winners.sql.j2``, raise :data:`GUARD`; so does the append of a
first chunk into an empty lake, ``tiering_pk_load.sql.j2``), so every write through ``lake_write.ChangelogWrite``
(tiering rounds, KV snapshots and the snapshot splits built from them) gets it
without reading the chunk twice. When the MERGE refuses a chunk, one Spark
query (``sql/templates/changelog_check.sql.j2``) finds unknown
``_change_type`` values, rows with a NULL key column, and keys with two
different changes in one commit whose order ``sequence-by`` does not decide.
Any of them fails the chunk with a :class:`ChangelogError` naming the table,
the values or keys, the commit and the fix; nothing of the chunk is written.
The rule is documented in docs/tiering.md ("What lands in the lake").
"""

from __future__ import annotations

import json
from typing import Any

from tierlake import sql
from tierlake.server.catalog.spec import CHANGE_TYPE, CHANGE_TYPES, TieredSpec
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.exceptions import ChangelogError

T_CHANGELOG_CHECK = "templates/changelog_check.sql.j2"
# raise_error text of the primary-key winners (tiering_pk_winners.sql.j2) when a chunk breaks the rule.
GUARD = "tierlake: the chunk breaks the changelog rule of primary-key tables"
SHOWN = 5  # ambiguous keys named in the message (the query counts them all)
FIX_ORDER = ("declare 'sequence-by' with a distinct value per change of a key within a commit, "
             "or write those changes in separate commits")


def json_columns(spark: Any, delta_view: str, columns: list[str]) -> list[str]:
    """The columns compared as JSON (maps: min/max need orderable types)."""
    types = {f.name.lower(): f.dataType.simpleString() for f in spark.table(delta_view).schema.fields}
    return [c for c in columns if "map<" in types.get(c.lower(), "")]


def check_changes(spark: Any, stream: TablePath, spec: TieredSpec, delta_view: str, files_view: str,
                  columns: list[str]) -> None:
    """Raise :class:`ChangelogError` if the changes in ``delta_view`` break the changelog rule."""
    statement = sql.render_checked(
        T_CHANGELOG_CHECK, delta=delta_view, files=files_view, columns=columns,
        json_columns=json_columns(spark, delta_view, columns),
        keys=spec.primary_key, sequence_by=spec.sequence_by, change_type=CHANGE_TYPE, change_types=CHANGE_TYPES,
        shown=SHOWN)
    problems = [row.asDict() for row in spark.sql(statement).collect()]
    if problems:
        first = min(p["position"] for p in problems)
        raise ChangelogError(describe(str(stream), spec, problems, first, _snapshot_at(spark, stream, first)))


def describe(stream: str, spec: TieredSpec, problems: list[dict], first: int,
             snapshot: tuple[int, int | None] | None) -> str:
    """The error text: what is wrong, where, and how to resume. ``problems`` are
    the check's rows; ``snapshot`` is ``(snapshot id, parent id)`` of the commit at ``first``."""
    parts = []
    types = sorted((p for p in problems if p["problem"] == "change_type"), key=lambda p: (p["position"], p["detail"]))
    if types:
        parts.append(
            f"unknown {CHANGE_TYPE} values "
            + ", ".join(f"{_quote(p['detail'])} ({_rows(p['rows'])}, first at log position {p['position']})"
                        for p in types)
            + "; accepted are " + ", ".join(_quote(t) for t in CHANGE_TYPES) + " and NULL (upsert)")
    for p in problems:
        if p["problem"] == "null_key":
            parts.append(f"{_rows(p['rows'])} with a NULL key column ({', '.join(spec.primary_key)}), first at log "
                         f"position {p['position']}, e.g. {p['detail']}; key columns must not be NULL")
    ambiguous = sorted((p for p in problems if p["problem"] == "ambiguous"), key=lambda p: (p["position"], p["detail"]))
    if ambiguous:
        why = (f"their sequence-by column {spec.sequence_by} is NULL or equal" if spec.sequence_by
               else "the table declares no sequence-by")
        named = ", ".join(f"key {_key(p['detail'])} ({p['rows']} changes in the commit at log position "
                          f"{p['position']})" for p in ambiguous)
        more = ambiguous[0]["total"] - len(ambiguous)
        parts.append(f"the order of different changes to one key in one commit cannot be decided ({why}): {named}"
                     + (f" and {more} more key{'s' if more != 1 else ''}" if more > 0 else "")
                     + f"; {FIX_ORDER}")
    where = f"log position {first}" + (f" (snapshot {snapshot[0]})" if snapshot else "")
    return (f"the changelog of primary-key table {stream} cannot be tiered: " + "; ".join(parts)
            + f". Nothing of the commit at {where} was tiered. " + _resume(stream, snapshot))


def _resume(stream: str, snapshot: tuple[int, int | None] | None) -> str:
    retry = f"CALL sys.retry_tiering('{stream}')"
    if snapshot is not None and snapshot[1] is None:
        return (f"That is the stream table's first commit, which cannot be rolled back: create the stream table "
                f"again and write its rows corrected (or {retry} after fixing it otherwise)")
    before = snapshot[1] if snapshot is not None else "the snapshot before it"
    return (f"To resume, take that commit out of the stream table's history: "
            f"CALL spark_catalog.system.rollback_to_snapshot('{stream}', {before}), write its rows again corrected, "
            f"put later commits back in order with CALL spark_catalog.system.cherrypick_snapshot('{stream}', "
            f"<snapshot id>), then {retry}. A DELETE on the stream table does not help: tiering refuses "
            "non-append commits")


def _snapshot_at(spark: Any, stream: TablePath, position: int) -> tuple[int, int | None] | None:
    """``(snapshot id, parent id)`` of the stream commit at ``position`` (error path only)."""
    table = load_table(spark, stream)
    snapshot = table.currentSnapshot()
    while snapshot is not None and int(snapshot.sequenceNumber()) > position:
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None
    if snapshot is None or int(snapshot.sequenceNumber()) != position:
        return None
    parent = snapshot.parentId()
    return int(snapshot.snapshotId()), (None if parent is None else int(parent))


def _rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''}"


def _quote(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


def _key(detail: str) -> str:
    """``{"order_id":7}`` → ``(order_id=7)``."""
    try:
        fields = json.loads(detail)
    except ValueError:
        return detail
    return "(" + ", ".join(f"{k}={_quote(v) if isinstance(v, str) else json.dumps(v)}"
                           for k, v in fields.items()) + ")"
