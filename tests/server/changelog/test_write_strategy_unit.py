"""The one write-strategy dispatch (server/changelog/write_strategy.py): golden spec × chunk → strategy."""

from __future__ import annotations

import pytest

from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.changelog import lake_write
from tierlake.server.changelog.write_strategy import WriteStrategy as W
from tierlake.server.changelog.write_strategy import choose

LOG = TieredSpec()
PK = TieredSpec(primary_key=["id"])
PK_PARTITIONED = TieredSpec(primary_key=["id"], lake_partition=["days(ts)"])
LOG_PARTITIONED = TieredSpec(lake_partition=["days(ts)"])

# (spec, snapshot split, into an empty target, the lake takes the stream's files) → strategy
CASES = [
    (LOG, True, False, False, W.KV_SNAPSHOT_SPLIT),
    (PK, True, True, False, W.KV_SNAPSHOT_SPLIT),
    (LOG, False, False, True, W.LOG_FILE_COPY),
    (LOG, False, True, True, W.LOG_FILE_COPY),
    (LOG, False, True, False, W.LOG_APPEND),
    (LOG_PARTITIONED, False, False, False, W.LOG_APPEND),
    (PK, False, False, True, W.PK_MERGE),
    (PK, False, True, False, W.PK_LOAD),
    (PK_PARTITIONED, False, True, False, W.PK_MERGE),  # an unshuffled append could open a writer per partition
]


@pytest.mark.parametrize("spec, split, empty, copyable, expected", CASES)
def test_choose(spec, split, empty, copyable, expected):
    asked = []

    def files_copyable():
        asked.append(True)
        return copyable

    assert choose(spec, snapshot_split=split, into_empty=empty, files_copyable=files_copyable) is expected
    # Only a log table's changelog chunk asks whether its files can be copied (asking may open the branch).
    assert bool(asked) == (not split and not spec.is_primary_key)


def test_every_changelog_strategy_has_its_statement():
    assert set(lake_write.STATEMENTS) == {W.LOG_APPEND, W.PK_MERGE, W.PK_LOAD}
    assert set(W) == set(lake_write.STATEMENTS) | {W.KV_SNAPSHOT_SPLIT, W.LOG_FILE_COPY}
