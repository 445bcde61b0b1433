"""Stream snapshot expiry against an outside appender whose clock is behind (issue 50, a suspicion
read from the code, reproduced): Iceberg accepts a commit whose timestamp is up to a minute before the
table's last, so an untiered commit can be older than the tiered one before it. Expiry must keep it:
the next round walks the stream's commits back to the tiered position."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.server.tiering.test_fresh_views import create, force_round, paths
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.positions import lake_position
from tierlake.server.maintenance import tables as table_maintenance
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.session import iceberg_table

pytestmark = pytest.mark.integration

_counter = itertools.count()


def shift_snapshot_time(spark, table: str, snapshot_id: int, delta_ms: int) -> None:
    """Rewrite the stream's metadata as if ``snapshot_id`` had been committed by a process whose clock
    was ``-delta_ms`` behind (its commit passed Iceberg's one-minute check)."""
    parser = jclass("org.apache.iceberg.TableMetadataParser", spark.sparkContext._jvm)
    ops = iceberg_table(spark, table).operations()
    base = ops.current()
    doc = json.loads(str(parser.toJson(base)))
    shifted = [s for s in doc["snapshots"] if s["snapshot-id"] == snapshot_id]
    assert shifted, snapshot_id
    for snapshot in shifted:
        snapshot["timestamp-ms"] += delta_ms
    ops.commit(base, parser.fromJson(base.metadataFileLocation(), json.dumps(doc)))


def test_expiry_keeps_an_untiered_commit_whose_timestamp_is_before_the_tiered_one(hive_cursor, spark):
    table = create(hive_cursor, f"clock{next(_counter)}", pk=False)
    stream, lake, _ = paths(table)
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.0, 0)")
    force_round(spark, table)
    tiered = iceberg_table(spark, table).currentSnapshot()
    spark.sql(f"INSERT INTO {table} VALUES (2, 2.0, 0)")  # the appender whose clock is 50 s behind
    behind = iceberg_table(spark, table).currentSnapshot()
    spark.sql(f"INSERT INTO {table} VALUES (3, 3.0, 0)")
    shift_snapshot_time(spark, table, int(behind.snapshotId()),
                        int(tiered.timestampMillis()) - int(behind.timestampMillis()) - 50_000)
    assert iceberg_table(spark, table).snapshot(behind.snapshotId()).timestampMillis() < tiered.timestampMillis()

    position = lake_position(iceberg_table(spark, lake.quoted))[0]
    action = table_maintenance.Action("stream_expire_snapshots", table, started_ms=0, duration_ms=0)
    # Max age 0 and one snapshot retained: everything the log-retention bound allows goes.
    table_maintenance.expire_stream(TableHandle(spark, stream, lake), position, 0, 1, action)
    assert iceberg_table(spark, table).snapshot(behind.snapshotId()) is not None, action

    force_round(spark, table)
    lake_ids = sorted(r[0] for r in spark.sql(f"SELECT id FROM {lake.quoted}").collect())
    assert lake_ids == [1, 2, 3]
