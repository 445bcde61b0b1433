"""Where the lake is, and whether the stream is still the table it tiered (docs/design.md, 'Log positions').

The lake's tiered position is recorded twice by every tiering lake commit, in
one metadata commit (:func:`position_properties`, set by the fast-forward in
``server/tiering/round.py``): in the snapshot's summary
(``tiering.source-position``) and in the lake table's properties
(``tierlake.lake.tiered-position``). Snapshot expiry — a user's
``expire_snapshots`` after ``rewrite_data_files``, or tierlake's own lake
maintenance — removes summaries, never properties. The newest summary in
``main``'s history wins (it describes the rows ``main`` holds, also after a
user rolled ``main`` back); the property is what is left when expiry removed
them all. A history that ends at an expired snapshot with no property is an
error: position 0 would tier the whole stream again.

The fast-forward also records which lake snapshot ``main`` then pointed at
(``tierlake.lake.tiered-lake-snapshot-id``). ``REPLACE TABLE`` keeps a table's
properties and old snapshots but starts ``main`` afresh: a ``main`` whose
whole, unexpired history holds no tiering commit while the table recorded one
was replaced (or rolled back past its first tiering commit) and fails with
:class:`LakeReplacedError` instead of continuing after the old position.

The coordinator's ``tiered_position`` cross-checks it: a lake that knows no
position while the coordinator recorded one lost its history.

The stream's Iceberg table UUID is recorded at registration (in
``sys.tiering_tables``) and with every lake commit (in the lake's properties):
a stream table dropped and created again under its name has another UUID,
and tiering it into the old lake would skip its first commits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tierlake.server.catalog.properties import (
    LAKE_MAIN_SNAPSHOT,
    LAKE_STREAM_UUID,
    LAKE_TIERED_POSITION,
    LAKE_TIERED_SNAPSHOT,
    SOURCE_POSITION,
    SOURCE_SNAPSHOT,
)
from tierlake.server.exceptions import LakeHistoryError, LakeReplacedError, StreamReplacedError
from tierlake.server.runtime.jvm import string_map

log = logging.getLogger("tierlake.tiering")

MAX_WALK = 100_000


@dataclass(frozen=True)
class Registered:
    """What the coordinator recorded for a table (``sys.tiering_tables``), cross-checked when planning."""

    tiered_position: int | None = None
    stream_uuid: str | None = None


def summary(snapshot: Any) -> dict[str, str]:
    """An Iceberg snapshot's summary (a Java map) as a Python dict."""
    return string_map(snapshot.summary())


def table_properties(table: Any) -> dict[str, str]:
    return string_map(table.properties())


def snapshot_at(stream_table: Any, position: int) -> Any:
    """The stream snapshot at ``position`` reached from the current one through parents that were not
    expired, or None."""
    snapshot = stream_table.currentSnapshot()
    while snapshot is not None and int(snapshot.sequenceNumber()) > position:
        parent = snapshot.parentId()
        snapshot = None if parent is None else stream_table.snapshot(parent)
    if snapshot is None or int(snapshot.sequenceNumber()) != position:
        return None
    return snapshot


def position_properties(position: int, stream_snapshot_id: int | None, stream_uuid: str | None) -> dict[str, str]:
    """The lake table properties a tiering lake commit sets with its fast-forward."""
    props = {LAKE_TIERED_POSITION: str(position)}
    if stream_snapshot_id is not None:
        props[LAKE_TIERED_SNAPSHOT] = str(stream_snapshot_id)
    if stream_uuid is not None:
        props[LAKE_STREAM_UUID] = stream_uuid
    return props


def lake_position(lake_table: Any, name: Any = None) -> tuple[int, int | None]:
    """``(position, stream snapshot id)`` the lake table covers; ``(0, None)`` for a lake never tiered into.

    Raises :class:`LakeHistoryError` when ``main``'s history was cut by
    snapshot expiry before any tiering commit and no position is recorded.
    """
    position, sid, _ = recorded_position(lake_table, name)
    return position, sid


def recorded_position(lake_table: Any, name: Any = None) -> tuple[int, int | None, bool]:
    """:func:`lake_position` and whether the lake recorded it (False: never tiered into)."""
    snapshot = lake_table.currentSnapshot()
    walked, expired = 0, None
    while snapshot is not None and walked < MAX_WALK:
        props = summary(snapshot)
        if SOURCE_POSITION in props:
            sid = props.get(SOURCE_SNAPSHOT)
            return int(props[SOURCE_POSITION]), (int(sid) if sid else None), True
        parent = snapshot.parentId()
        if parent is None:
            break
        snapshot = lake_table.snapshot(parent)
        if snapshot is None:
            expired = int(parent)
        walked += 1
    recorded = table_properties(lake_table)
    cut = expired is not None or walked >= MAX_WALK
    if LAKE_TIERED_POSITION in recorded and not cut and recorded.get(LAKE_MAIN_SNAPSHOT):
        # main's whole history is there and holds no tiering commit, yet the table recorded one:
        # REPLACE TABLE (it keeps properties and old snapshots, main starts afresh) or a rollback
        # to before the first tiering commit. The property would skip the rows before it.
        lake = name or lake_table.name()
        raise LakeReplacedError(
            f"the lake table {lake} was replaced (REPLACE TABLE or CREATE OR REPLACE) or rolled back to before "
            f"its first tiering commit: its main branch no longer descends from lake snapshot "
            f"{recorded[LAKE_MAIN_SNAPSHOT]}, which held the stream's rows up to position "
            f"{recorded[LAKE_TIERED_POSITION]}. Tiering from that position would leave every stream row before it "
            f"missing from the lake. To rebuild the lake table from the stream's retained history: DROP TABLE "
            f"{lake}, then CALL sys.disable_tiering and sys.enable_tiering for its stream table. To keep the rows "
            f"it holds now as the lake and re-register: ALTER TABLE {lake} UNSET TBLPROPERTIES "
            f"('{LAKE_TIERED_POSITION}', '{LAKE_MAIN_SNAPSHOT}'), then the same two calls"
        )
    if LAKE_TIERED_POSITION in recorded:
        sid = recorded.get(LAKE_TIERED_SNAPSHOT)
        return int(recorded[LAKE_TIERED_POSITION]), (int(sid) if sid else None), True
    if cut:
        raise LakeHistoryError(
            f"the lake table {name or lake_table.name()} does not say which stream position it covers: its "
            f"history before snapshot {lake_table.currentSnapshot().snapshotId()} was expired (snapshot "
            f"{expired} is gone) and it has no '{LAKE_TIERED_POSITION}' property. Tiering it from position 0 "
            "would add every stream row again. If you know the position, set it: ALTER TABLE "
            f"{name or lake_table.name()} SET TBLPROPERTIES ('{LAKE_TIERED_POSITION}'='<position>'); to rebuild "
            "the lake table from the stream instead, drop it and call sys.disable_tiering and sys.enable_tiering"
        )
    return 0, None, False


def cross_check(lake: Any, position: int, found: bool, registered: Registered | None) -> None:
    """The lake's position against the coordinator's.

    ``found``: the lake recorded a position (a summary or the property). The
    lake is the authority for the rows it holds (it is ahead after a crash
    between the lake commit and the heartbeat); a coordinator ahead of a lake
    that recorded nothing means the lake lost its history.
    """
    if registered is None or not registered.tiered_position:
        return
    if not found:
        raise LakeHistoryError(
            f"the lake table {lake} has no record of a tiering commit, but the coordinator recorded stream "
            f"position {registered.tiered_position} as tiered into it: was the lake table dropped or replaced, "
            "or its history expired? Tiering it from position 0 could add rows again. To rebuild the lake table "
            "from the stream, drop it and call sys.disable_tiering and sys.enable_tiering"
        )
    if position < registered.tiered_position:
        log.warning("the lake table %s covers stream position %d, behind the coordinator's %d (main was rolled "
                    "back?): tiering from the lake's position", lake, position, registered.tiered_position)


def check_identity(stream: Any, lake: Any, stream_table: Any, lake_table: Any, registered: Registered | None) -> None:
    """The stream table is the one registered, and the one the lake's rows came from."""
    uuid = str(stream_table.uuid())
    fix = (f"Nothing of the new table was tiered. To tier it: CALL sys.disable_tiering('{stream}'); keep the old "
           f"table's lake rows elsewhere if you need them (ALTER TABLE {lake} RENAME TO <another name>) or drop "
           f"them (DROP TABLE {lake}); then CALL sys.enable_tiering('{stream}'), which creates a new lake table "
           "and tiers every row of the new stream table")
    if registered is not None and registered.stream_uuid and registered.stream_uuid != uuid:
        raise StreamReplacedError(
            f"the stream table {stream} was dropped and created again: its Iceberg table UUID is {uuid}, but "
            f"{registered.stream_uuid} was registered for tiering, and the lake table {lake} holds the old "
            f"table's rows. {fix}"
        )
    recorded = table_properties(lake_table).get(LAKE_STREAM_UUID)
    if recorded and recorded != uuid:
        raise StreamReplacedError(
            f"the lake table {lake} holds rows of another stream table (UUID {recorded}) than {stream} "
            f"(UUID {uuid}): was {stream} dropped and created again? {fix}"
        )
