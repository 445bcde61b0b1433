"""Fresh views: ``<db><suffix>.<table>`` reads the lake table plus the changes
committed to the stream table after the lake's tiered position, merged by the
round's rule (``sql/templates/fresh_view.sql.j2``; docs/tiering.md, "Fresh
views").

The view is plain SQL with literals: the lake snapshot it reads and the
position after which it reads the stream. Both are taken from one lake
snapshot (its ``tiering.source-position``), and the view is re-created after
every lake commit (:func:`after_lake_commit`, called by the round). A
``CREATE OR REPLACE VIEW`` is one metastore update, so a query resolves either
the old pair or the new one; each pair alone counts every committed change
exactly once, whenever the query runs. A view that missed a refresh (a failed
hook) is still right, only slower: its stream part starts further back.

The stream table names its view in the internal property
``tierlake.fresh-view``, so a round (in the server or a tiering service) finds
it without the server's settings.
"""

from __future__ import annotations

import logging
from typing import Any

from tierlake import sql
from tierlake.server.catalog.columns import columns_of
from tierlake.server.catalog.properties import FRESH_VIEW_PROPERTY
from tierlake.server.catalog.spec import CHANGE_TYPE, TieredSpec
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.catalog.tiered_tables import suffixed_path
from tierlake.server.changelog.planner import lake_position
from tierlake.server.runtime.config import Config
from tierlake.server.runtime.session import iceberg_table

log = logging.getLogger("tierlake.fresh")

T_FRESH_VIEW = "templates/fresh_view.sql.j2"
T_CREATE_DATABASE = "templates/create_database.sql.j2"
T_DROP_VIEW = "templates/drop_view.sql.j2"
COMMENT = "tierlake fresh view of {stream}: {lake} at snapshot {snapshot} + stream changes after position {position}"


def fresh_path(config: Config | None, stream: TablePath) -> TablePath:
    """``<db><tierlake.fresh.database-suffix>.<table>``."""
    return suffixed_path(config, stream, "tierlake.fresh.database-suffix")


def _properties(spark: Any, stream: TablePath) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(iceberg_table(spark, stream.quoted).properties()).items()}


def view_of(spark: Any, stream: TablePath) -> TablePath | None:
    """The fresh view the stream table names, if any."""
    name = _properties(spark, stream).get(FRESH_VIEW_PROPERTY)
    return TablePath(*name.split(".", 1)) if name else None


def render(spark: Any, stream: TablePath, lake: TablePath, view: TablePath) -> str:
    """The ``CREATE OR REPLACE VIEW`` statement pinned to the lake's current snapshot."""
    props = _properties(spark, stream)
    stream_schema = spark.table(stream.quoted).schema
    spec = TieredSpec.from_properties(props, columns_of(stream_schema))
    lake_table = iceberg_table(spark, lake.quoted)
    snapshot = lake_table.currentSnapshot()
    snapshot_id = None if snapshot is None else int(snapshot.snapshotId())
    position = lake_position(lake_table)[0] if snapshot is not None else 0
    # The lake's columns, read at that snapshot's schema; the stream column of
    # the same name carries each (a rename reaches the lake at the next round).
    lake_frame = spark.read.format("iceberg")
    if snapshot_id is not None:
        lake_frame = lake_frame.option("snapshot-id", str(snapshot_id))
    columns = columns_of(lake_frame.load(lake.quoted).schema)
    stream_names = {f.name.lower(): f.name for f in stream_schema.fields if f.name.lower() != CHANGE_TYPE}
    stream_columns = [stream_names.get(c.name.lower()) for c in columns]
    comment = COMMENT.format(stream=stream, lake=lake, snapshot=snapshot_id, position=position)
    return sql.render_checked(
        T_FRESH_VIEW, view=[view.database, view.table], lake=[lake.database, lake.table],
        stream=[stream.database, stream.table], entries=[stream.database, stream.table, "entries"],
        columns=columns, stream_columns=stream_columns, keys=spec.primary_key, sequence_by=spec.sequence_by,
        change_type=CHANGE_TYPE, lake_snapshot=snapshot_id, position=position, comment=comment)


def create(spark: Any, config: Config | None, stream: TablePath, lake: TablePath) -> TablePath:
    """Create (or re-create) the fresh view of a tiered table and record it on the stream table."""
    view = fresh_path(config, stream)
    spark.sql(sql.render(T_CREATE_DATABASE, database=view.database))
    spark.sql(render(spark, stream, lake, view))
    if _properties(spark, stream).get(FRESH_VIEW_PROPERTY) != str(view):
        iceberg_table(spark, stream.quoted).updateProperties().set(FRESH_VIEW_PROPERTY, str(view)).commit()
    log.info("fresh view %s of %s created", view, stream)
    return view


def refresh(spark: Any, stream: TablePath, lake: TablePath) -> None:
    """Re-pin the stream's fresh view (if it has one) to the lake's current snapshot."""
    view = view_of(spark, stream)
    if view is not None:
        spark.sql(render(spark, stream, lake, view))


def after_lake_commit(spark: Any, plan: Any) -> None:
    """The round's hook after each lake commit: never fails the round (the
    old view stays correct, it only reads more of the stream)."""
    try:
        refresh(spark, plan.stream, plan.lake)
    except Exception:  # see the docstring
        log.warning("could not refresh the fresh view of %s", plan.stream, exc_info=True)


def drop(spark: Any, config: Config | None, stream: TablePath) -> TablePath | None:
    """Drop the fresh view of ``stream`` (named by its property, else by the setting) and forget it."""
    try:
        view = view_of(spark, stream)
        has_table = True
    except Exception:  # noqa: BLE001 - the stream table is gone already (DROP TABLE)
        view, has_table = None, False
    view = view or fresh_path(config, stream)
    drop_view(spark, view)
    if has_table:
        props = _properties(spark, stream)
        if FRESH_VIEW_PROPERTY in props:
            iceberg_table(spark, stream.quoted).updateProperties().remove(FRESH_VIEW_PROPERTY).commit()
    log.info("fresh view %s of %s dropped", view, stream)
    return view


def drop_view(spark: Any, view: TablePath) -> None:
    spark.sql(sql.render(T_DROP_VIEW, view=[view.database, view.table]))
