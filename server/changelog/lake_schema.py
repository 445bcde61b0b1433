"""Stream schema changes, carried to the lake (or KV) table by Iceberg field id.

:func:`sync_lake_schema` runs before a round (and a KV snapshot) writes:

- a column added to the stream is added to the lake table;
- a renamed stream column (same field id, new name) renames its lake column
  (``tierlake.lake.field-ids`` says which one), so its values keep flowing
  into the one column;
- a dropped stream column keeps its lake column: rows tiered from then on
  have NULL there (an upserted key too), older rows keep their values; a
  column added again under that name continues the lake column;
- a type that differs, a rename onto a name the lake table still uses, and a
  renamed or dropped key or ``sequence-by`` column are guard errors naming
  the statement to run.

:func:`project` reads every chunk onto those columns by field id: the first
chunk of a table is read at a snapshot (Iceberg then uses *that snapshot's*
schema: older names, no later columns, no ``_change_type`` added by
``enable_tiering``), later chunks with the current schema.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tierlake import sql
from tierlake.server.catalog import field_ids
from tierlake.server.catalog.columns import schema_columns
from tierlake.server.catalog.properties import LAKE_FIELD_IDS
from tierlake.server.catalog.spec import CHANGE_TYPE, Column, TieredSpec, data_columns
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.exceptions import TieringGuardError

log = logging.getLogger("tierlake.tiering")

T_ADD_COLUMNS = "templates/lake_add_columns.sql.j2"


@dataclass(frozen=True)
class Carried:
    """A lake column and the stream field it carries (None: dropped from the stream, NULL from then on)."""

    name: str
    type: str
    field_id: int | None


def change_type_column(table: Any) -> Carried:
    """The stream's ``_change_type``; its field id is None while no schema has it (``table``: the
    stream's Iceberg table)."""
    fields = field_ids.schema_fields(table.schema())
    return Carried(CHANGE_TYPE, "string", next((fid for fid, n in fields.items() if n.lower() == CHANGE_TYPE), None))


def read_fields(table: Any, snapshot_id: int | None) -> dict[int, str]:
    """``{field id: name}`` of the schema a read of ``table`` sees: with
    ``snapshot-id`` that snapshot's schema (as Iceberg's Spark reader does),
    otherwise (an incremental read) the current one."""
    schema = None
    if snapshot_id is not None:
        snapshot = table.snapshot(snapshot_id)
        schema_id = None if snapshot is None else snapshot.schemaId()
        schema = None if schema_id is None else table.schemas().get(schema_id)
    return field_ids.schema_fields(schema if schema is not None else table.schema())


def project(frame: Any, fields: dict[int, str], columns: list[Carried]) -> Any:
    """``frame`` (read with the schema ``fields``) as ``columns`` plus ``_file``/``_pos``:
    each column taken by field id under the lake name, cast to the lake type;
    a field the read schema lacks (added later, or dropped) is NULL."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    out = []
    for c in columns:
        name = None if c.field_id is None else fields.get(c.field_id)
        if name is None:
            out.append(F.lit(None).cast(c.type).alias(c.name))
            continue
        col = F.col(sql.quote_ident(name))
        out.append((col if types.get(name) == c.type else col.cast(c.type)).alias(c.name))
    return frame.select(*out, F.col("_file"), F.col("_pos"))


def carried_columns(spark: Any, stream_table: Any, lake_table: Any) -> list[Carried]:
    """The lake (or KV) table's columns and the stream fields they carry now, read only: by the
    lake's recorded field ids (by name for a lake without them), as :func:`sync_lake_schema` maps
    them, without adding, renaming or recording anything. A lake column that carries no current
    stream field has ``field_id`` None; a stream column the lake does not have yet is left out
    (``sys.validate`` compares what both hold: server/quality/lake_diff.py)."""
    fields = {fid: name for fid, name in field_ids.schema_fields(stream_table.schema()).items()
              if name.lower() != CHANGE_TYPE}
    lake_cols = schema_columns(spark, lake_table.schema())
    names = {c.name.lower() for c in lake_cols}
    recorded = field_ids.read(lake_table)
    if recorded is None:  # a lake table from before field ids were recorded: same name, same column
        recorded = {fid: name for fid, name in fields.items() if name.lower() in names}
    carried = {name.lower(): fid for fid, name in recorded.items() if fid in fields and name.lower() in names}
    return [Carried(c.name, c.type, carried.get(c.name.lower())) for c in lake_cols]


# The answers of syncs that changed nothing, by everything a sync reads (see _sync_key): a round
# whose stream and lake schemas did not change since an earlier round asks nothing more.
_SYNCED: OrderedDict[tuple, tuple[Carried, ...]] = OrderedDict()
_SYNCED_LOCK = threading.Lock()
SYNCED_MAX = 4096  # tables; least recently synced forgotten first


def sync_lake_schema(handle: TableHandle) -> list[Carried]:
    """Bring the handle's lake (a lake or KV table) up to its stream's columns; the columns a write fills.

    See the module docstring for the rules. A lake column that carries no
    stream column (dropped from the stream, or added or renamed in the lake
    table by hand) is NULL in the rows written from then on.

    Both tables are the handle's, as loaded. A sync that found nothing to
    change is remembered by its inputs (:func:`_sync_key`), and the next one
    with the same inputs answers from memory.
    """
    spark, stream, lake = handle.spark, handle.stream, handle.lake
    stream_table, lake_table, spec = handle.stream_table, handle.lake_table, handle.spec
    recorded_text = field_ids.read_text(lake_table)
    key = _sync_key(stream_table, lake_table, recorded_text, spec)
    with _SYNCED_LOCK:
        known = _SYNCED.get(key)
        if known is not None:
            _SYNCED.move_to_end(key)
            return list(known)
    columns, changed = _sync(spark, stream, lake, stream_table, lake_table, recorded_text, spec)
    if not changed:
        with _SYNCED_LOCK:
            _SYNCED[key] = tuple(columns)
            while len(_SYNCED) > SYNCED_MAX:
                _SYNCED.popitem(last=False)
    return columns


def _sync_key(stream_table: Any, lake_table: Any, recorded_text: str | None, spec: TieredSpec) -> tuple:
    """Everything :func:`_sync` reads: both tables' identity and current schema (a schema id names
    one schema of a table for good), the lake's recorded field ids, the key and sequence-by columns."""
    return (str(stream_table.uuid()), int(stream_table.schema().schemaId()), str(lake_table.uuid()),
            int(lake_table.schema().schemaId()), recorded_text, tuple(spec.primary_key), spec.sequence_by)


def clear_sync_cache() -> None:
    """Forget every remembered sync (tests)."""
    with _SYNCED_LOCK:
        _SYNCED.clear()


def _sync(spark: Any, stream: TablePath, lake: TablePath, stream_table: Any, lake_table: Any,
          recorded_text: str | None, spec: TieredSpec) -> tuple[list[Carried], bool]:
    """:func:`sync_lake_schema` from the loaded tables: the columns, and whether it committed anything.

    Everything is read from ``stream_table`` and ``lake_table`` (the objects
    the cache key was taken from), never from a newer load, so an answer is
    remembered under the inputs that produced it."""
    fields = {fid: name for fid, name in field_ids.schema_fields(stream_table.schema()).items()
              if name.lower() != CHANGE_TYPE}
    stream_types = {c.name.lower(): c.type for c in data_columns(schema_columns(spark, stream_table.schema()))}
    lake_cols = {c.name.lower(): c for c in schema_columns(spark, lake_table.schema())}
    initial = field_ids.decode(recorded_text)
    recorded = initial
    if recorded is None:  # a lake table from before field ids were recorded: same name, same column
        recorded = {fid: lake_cols[name.lower()].name for fid, name in fields.items() if name.lower() in lake_cols}
    # A lake column dropped or renamed by hand carries nothing any more.
    mapping = {fid: name for fid, name in recorded.items() if name.lower() in lake_cols}
    _check_key_columns(stream, spec, fields, mapping)
    changed = False

    renames = _plan_renames(stream, lake, fields, mapping, set(lake_cols))
    if renames or mapping != recorded:
        _rename(lake_table, renames, mapping)  # through lake_table: its next read sees the commit
        changed = True
        if renames:
            log.info("renamed columns %s of lake table %s", renames, lake)
            lake_cols = {c.name.lower(): c for c in schema_columns(spark, lake_table.schema())}

    missing: list[Column] = []
    for fid, name in fields.items():
        if fid in mapping:
            continue
        existing = lake_cols.get(name.lower())
        if existing is not None:
            # The lake column of a dropped stream column of this name (or of a
            # lake table without recorded ids): the new stream column continues it.
            for holder in [f for f, n in mapping.items() if n.lower() == name.lower()]:
                del mapping[holder]
            mapping[fid] = existing.name
        else:
            missing.append(Column(name, stream_types[name.lower()]))
            mapping[fid] = name
    if missing:
        spark.sql(sql.render_checked(T_ADD_COLUMNS, table=[lake.database, lake.table], columns=missing))
        log.info("added columns %s to lake table %s", [c.name for c in missing], lake)
        changed = True
        lake_table.refresh()  # committed by Spark SQL, which lake_table does not see
        lake_cols = {c.name.lower(): c for c in schema_columns(spark, lake_table.schema())}

    for fid, name in fields.items():
        current = lake_cols[mapping[fid].lower()]
        if current.type != stream_types[name.lower()]:
            raise TieringGuardError(
                f"column {name} of stream table {stream} is {stream_types[name.lower()]} but {current.type} in "
                f"lake table {lake}; change the lake table's column type (ALTER TABLE {lake} ALTER COLUMN "
                f"{current.name} TYPE {stream_types[name.lower()]}) if Iceberg allows the promotion, then "
                f"CALL sys.retry_tiering('{stream}')")
    if (field_ids.read(lake_table) if changed else initial) != mapping:
        lake_table.updateProperties().set(LAKE_FIELD_IDS, field_ids.encode(mapping)).commit()
        changed = True

    # Every lake column is written (Spark's INSERT and MERGE need them all):
    # one that carries no stream column now gets NULL.
    carried = {name.lower(): fid for fid, name in mapping.items() if fid in fields}
    return [Carried(c.name, c.type, carried.get(c.name.lower())) for c in lake_cols.values()], changed


def _check_key_columns(stream: TablePath, spec: TieredSpec, fields: dict[int, str], mapping: dict[int, str]) -> None:
    """Key and ``sequence-by`` columns are named in the stream's properties: they cannot follow a rename."""
    names = {n.lower() for n in fields.values()}
    for key in [*spec.primary_key, *([spec.sequence_by] if spec.sequence_by else [])]:
        if key in names:
            continue
        role = "sequence-by" if key == spec.sequence_by else "primary key"
        fid = next((f for f, n in mapping.items() if n.lower() == key), None)
        if fid is not None and fid in fields:
            raise TieringGuardError(
                f"{role} column {key} of stream table {stream} was renamed to {fields[fid]}; key and sequence-by "
                f"columns cannot be renamed: ALTER TABLE {stream} RENAME COLUMN {fields[fid]} TO {key}, then "
                f"CALL sys.retry_tiering('{stream}')")
        raise TieringGuardError(
            f"{role} column {key} of stream table {stream} no longer exists (dropped?); key and sequence-by "
            f"columns cannot be dropped: add it back (ALTER TABLE {stream} ADD COLUMN {key} …), then "
            f"CALL sys.retry_tiering('{stream}')")


def _plan_renames(stream: TablePath, lake: TablePath, fields: dict[int, str], mapping: dict[int, str],
                  lake_names: set[str]) -> list[tuple[str, str]]:
    """``[(lake column, new name)]`` in an order where each new name is free when it is taken;
    updates ``mapping``. A name some lake column keeps is a guard error."""
    pending = {fid: (mapping[fid], name) for fid, name in fields.items() if fid in mapping and mapping[fid] != name}
    names = set(lake_names)
    ordered: list[tuple[str, str]] = []
    while pending:
        ready = [fid for fid, (old, new) in pending.items() if new.lower() == old.lower() or new.lower() not in names]
        if not ready:
            fid, (old, new) = next(iter(pending.items()))
            raise TieringGuardError(
                f"column {old} of stream table {stream} was renamed to {new}, but lake table {lake} still has a "
                f"column {new}: rename or drop that lake column (ALTER TABLE {lake} RENAME COLUMN {new} TO "
                f"{new}_old), then CALL sys.retry_tiering('{stream}')")
        for fid in ready:
            old, new = pending.pop(fid)
            names.discard(old.lower())
            names.add(new.lower())
            mapping[fid] = new
            ordered.append((old, new))
    return ordered


def _rename(table: Any, renames: list[tuple[str, str]], mapping: dict[int, str]) -> None:
    """The renames and the new mapping as one Iceberg commit: a crash leaves both or neither."""
    tx = table.newTransaction()
    for old, new in renames:
        tx.updateSchema().renameColumn(old, new).commit()
    tx.updateProperties().set(LAKE_FIELD_IDS, field_ids.encode(mapping)).commit()
    tx.commitTransaction()
