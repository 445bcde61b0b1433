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
from dataclasses import dataclass
from typing import Any

from tierlake import sql
from tierlake.server.catalog import field_ids
from tierlake.server.catalog.columns import lake_columns, table_columns
from tierlake.server.catalog.properties import LAKE_FIELD_IDS
from tierlake.server.catalog.spec import CHANGE_TYPE, Column, TieredSpec
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.exceptions import TieringGuardError
from tierlake.server.runtime.session import iceberg_table

log = logging.getLogger("tierlake.tiering")

T_ADD_COLUMNS = "templates/lake_add_columns.sql.j2"


@dataclass(frozen=True)
class Carried:
    """A lake column and the stream field it carries (None: dropped from the stream, NULL from then on)."""

    name: str
    type: str
    field_id: int | None


def stream_carried(spark: Any, stream: TablePath) -> list[Carried]:
    """The stream's data columns as they are, carried under their own names."""
    ids = {name.lower(): fid for fid, name in field_ids.stream_fields(spark, stream).items()}
    return [Carried(c.name, c.type, ids.get(c.name.lower())) for c in lake_columns(spark, stream)]


def change_type_column(spark: Any, stream: TablePath) -> Carried:
    """The stream's ``_change_type``; its field id is None while no schema has it."""
    fields = field_ids.schema_fields(iceberg_table(spark, stream.quoted).schema())
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


def sync_lake_schema(spark: Any, stream: TablePath, lake: TablePath) -> list[Carried]:
    """Bring ``lake`` (a lake or KV table) up to the stream's columns; the columns a write fills.

    See the module docstring for the rules. A lake column that carries no
    stream column (dropped from the stream, or added or renamed in the lake
    table by hand) is NULL in the rows written from then on.
    """
    fields = field_ids.stream_fields(spark, stream)
    stream_types = {c.name.lower(): c.type for c in lake_columns(spark, stream)}
    table = iceberg_table(spark, lake.quoted)
    lake_cols = {c.name.lower(): c for c in table_columns(spark, lake)}
    recorded = field_ids.read(table)
    if recorded is None:  # a lake table from before field ids were recorded: same name, same column
        recorded = {fid: lake_cols[name.lower()].name for fid, name in fields.items() if name.lower() in lake_cols}
    # A lake column dropped or renamed by hand carries nothing any more.
    mapping = {fid: name for fid, name in recorded.items() if name.lower() in lake_cols}
    _check_key_columns(spark, stream, fields, mapping)

    renames = _plan_renames(stream, lake, fields, mapping, set(lake_cols))
    if renames or mapping != recorded:
        _rename(table, renames, mapping)
        if renames:
            log.info("renamed columns %s of lake table %s", renames, lake)
            lake_cols = {c.name.lower(): c for c in table_columns(spark, lake)}

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
        lake_cols = {c.name.lower(): c for c in table_columns(spark, lake)}

    for fid, name in fields.items():
        current = lake_cols[mapping[fid].lower()]
        if current.type != stream_types[name.lower()]:
            raise TieringGuardError(
                f"column {name} of stream table {stream} is {stream_types[name.lower()]} but {current.type} in "
                f"lake table {lake}; change the lake table's column type (ALTER TABLE {lake} ALTER COLUMN "
                f"{current.name} TYPE {stream_types[name.lower()]}) if Iceberg allows the promotion, then "
                f"CALL sys.retry_tiering('{stream}')")
    if field_ids.read(iceberg_table(spark, lake.quoted)) != mapping:
        iceberg_table(spark, lake.quoted).updateProperties().set(LAKE_FIELD_IDS, field_ids.encode(mapping)).commit()

    # Every lake column is written (Spark's INSERT and MERGE need them all):
    # one that carries no stream column now gets NULL.
    carried = {name.lower(): fid for fid, name in mapping.items() if fid in fields}
    return [Carried(c.name, c.type, carried.get(c.name.lower())) for c in lake_cols.values()]


def _check_key_columns(spark: Any, stream: TablePath, fields: dict[int, str], mapping: dict[int, str]) -> None:
    """Key and ``sequence-by`` columns are named in the stream's properties: they cannot follow a rename."""
    props = {str(k): str(v) for k, v in dict(iceberg_table(spark, stream.quoted).properties()).items()}
    spec = TieredSpec.from_properties(props)
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
