"""The one choice of how a chunk of changes is written into its lake (or KV) table.

dbt-spark style: each strategy is a template or a writer of its own, and this
module's :func:`choose` is the only place that picks one, from the table's
spec and what the round knows about the chunk and its target. Callers dispatch
on the answer (server/tiering/round.py ``write_chunk``, ``ChangelogWrite``);
none of them re-derives it.

=====================  ==============================================================================
strategy               when
=====================  ==============================================================================
``KV_SNAPSHOT_SPLIT``  the chunk is a split of a KV snapshot (a table enabled from existing rows)
``LOG_FILE_COPY``      a log table whose stream files the lake can take as they are (file_copy.py)
``LOG_APPEND``         any other log table chunk: ``INSERT … SELECT`` (tiering_log_append.sql.j2)
``PK_LOAD``            a primary-key chunk into a target known to hold no rows, not partitioned
                       further (``table.datalake.partition``): the winners appended
                       (tiering_pk_load.sql.j2)
``PK_MERGE``           any other primary-key chunk: ``MERGE INTO`` (tiering_pk_merge.sql.j2)
=====================  ==============================================================================
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from tierlake.server.catalog.spec import TieredSpec


class WriteStrategy(enum.Enum):
    KV_SNAPSHOT_SPLIT = "kv snapshot split"
    LOG_FILE_COPY = "log file copy"
    LOG_APPEND = "log append"
    PK_LOAD = "primary-key load"
    PK_MERGE = "primary-key merge"


def choose(spec: TieredSpec, *, snapshot_split: bool = False, into_empty: bool = False,
           files_copyable: Callable[[], bool] = lambda: False) -> WriteStrategy:
    """How to write one chunk.

    ``snapshot_split``: the chunk is a KV snapshot's split. ``into_empty``: the
    target holds no rows (the round's first chunk into a lake that had no
    snapshot when planned). ``files_copyable``: asked for log tables only, and
    only then (it may open the round's branch first): whether the lake can take
    the stream's files as they are.

    An unshuffled append into a lake partitioned further could hold a writer
    open per partition in every task, so such lakes keep the MERGE, whose write
    is clustered by partition."""
    if snapshot_split:
        return WriteStrategy.KV_SNAPSHOT_SPLIT
    if not spec.is_primary_key:
        return WriteStrategy.LOG_FILE_COPY if files_copyable() else WriteStrategy.LOG_APPEND
    if into_empty and not spec.lake_partition:
        return WriteStrategy.PK_LOAD
    return WriteStrategy.PK_MERGE
