"""A stream table's committer keeps the metadata it just committed instead of reading it back
(server/ingest/java/CommitterOps.java): what it keeps must be exactly what the metastore points at
and the file holds, through concurrent group commits, schema changes made by others and retried
statements, for log and primary-key tables."""

from __future__ import annotations

import json
import threading
import time

import pytest
from pyhive import hive

from tests.server.tiering.conftest import run
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.session import iceberg_table

pytestmark = pytest.mark.integration


def connect(server):
    return hive.connect("127.0.0.1", server.gateway.port, username="tester")


def counters(spark) -> dict:
    return json.loads(jclass(STREAM_INGEST, spark.sparkContext._jvm).counters())


def kept_equals_the_file(spark, table: str) -> dict:
    """The committer's metadata is its file's content, and the metastore's current file is that one or
    a later one (the server's own maintenance commits to stream tables too). Returns it, parsed."""
    loaded = iceberg_table(spark, table)
    kept = jclass(STREAM_INGEST, spark.sparkContext._jvm).committedMetadata(loaded)
    assert kept is not None
    location, kept_json = kept[0], kept[1]
    loaded.refresh()  # after the committer's metadata was taken: the metastore's current file, or a later one
    current = loaded.operations().current()
    history = [current.metadataFileLocation()] + [e.file() for e in current.previousFiles()]
    assert location in history, (location, history)
    parser = jclass("org.apache.iceberg.TableMetadataParser", spark.sparkContext._jvm)
    assert json.loads(kept_json) == json.loads(parser.toJson(parser.read(loaded.io(), location)))
    return json.loads(kept_json)


@pytest.mark.parametrize("pk", [False, True], ids=["log", "pk"])
def test_what_the_committer_keeps_is_what_it_committed(server, spark, db, pk):
    props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h'"
    if pk:
        props += ", 'primary-key'='id', 'bucket.num'='2'"
    table = f"{db}.c_{'pk' if pk else 'log'}"
    run(connect(server).cursor(), f"CREATE TABLE {table} (id BIGINT, v STRING) TBLPROPERTIES ({props})")
    reused = counters(spark)["metadataReused"]
    errors: list[BaseException] = []

    def writer(n: int, start: int, count: int, extra: str) -> None:
        try:
            cursor = connect(server).cursor()
            for i in range(start, start + count):
                cursor.execute(f"INSERT INTO {table} VALUES ({n * 1000 + i}, 'w{n}'{extra})")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def wave(start: int) -> None:
        # id, v and NULL for the rest (a primary-key table's change type, a column added later)
        extra = ", NULL" * (len(spark.table(table).columns) - 2)
        threads = [threading.Thread(target=writer, args=(n, start, 8, extra)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    wave(0)
    assert not errors, errors
    kept_equals_the_file(spark, table)
    # Another committer's change (Spark's own commit) between two waves: the committer finds it.
    run(connect(server).cursor(), f"ALTER TABLE {table} ADD COLUMN extra INT")
    wave(8)
    kept_equals_the_file(spark, table)
    assert not errors, errors
    assert counters(spark)["metadataReused"] > reused
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {table}").collect())
    assert rows == sorted((n * 1000 + i, f"w{n}") for n in range(4) for i in range(16))
    if not pk:
        return
    # One key changed by four statements in one group: the group's transaction holds a snapshot per
    # statement (docs/ingest.md, "Order"), and what is kept is still the file. The four queue behind a
    # query that holds the table's commit lock, so the first to commit takes all of them.
    width = len(spark.table(table).columns)
    hold = (f"INSERT INTO {table} SELECT 999 + length(java_method('java.lang.Thread', 'sleep', "
            f"CAST(3000 AS BIGINT))) * 0, 'slow'{', NULL' * (width - 2)} FROM range(1)")
    holder = threading.Thread(target=lambda: connect(server).cursor().execute(hold))
    holder.start()
    time.sleep(1)
    same_key = [threading.Thread(target=lambda n=n: connect(server).cursor().execute(
        f"INSERT INTO {table} VALUES (1, 'again {n}'{', NULL' * (width - 2)})")) for n in range(4)]
    for t in same_key:
        t.start()
    for t in [holder, *same_key]:
        t.join()
    kept = kept_equals_the_file(spark, table)
    previous = kept["metadata-log"][-1]["metadata-file"]
    parser = jclass("org.apache.iceberg.TableMetadataParser", spark.sparkContext._jvm)
    before = json.loads(parser.toJson(parser.read(iceberg_table(spark, table).io(), previous)))
    added = {x["snapshot-id"] for x in kept["snapshots"]} - {x["snapshot-id"] for x in before["snapshots"]}
    assert len(added) == 4, added
    assert [r[0] for r in spark.sql(f"SELECT count(*) FROM {table} WHERE id = 1").collect()] == [5]
