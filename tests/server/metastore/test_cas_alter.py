"""The embedded metastore's compare-and-set ``alter_table``
(server/metastore/java/CasAlterHandler.java): with Iceberg's metastore locks
off, concurrent commits to one table still all land, each exactly once."""

from __future__ import annotations

import threading
import uuid

import pytest

pytestmark = pytest.mark.integration


def metastore_client(spark):
    """A metastore client of this JVM (the same embedded Derby, the same handler)."""
    jvm = spark.sparkContext._jvm
    hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark.sparkContext._jsc.hadoopConfiguration(),
        jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf"))
    return jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(hive_conf), jvm


@pytest.fixture()
def table(spark):
    name = f"default.cas_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING iceberg "
              "TBLPROPERTIES ('commit.retry.num-retries'='50', 'commit.retry.min-wait-ms'='5')")
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_the_server_runs_iceberg_without_metastore_locks(spark):
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    assert conf.get("iceberg.engine.hive.lock-enabled") == "false"
    assert conf.get("hive.metastore.alter.impl") == "io.tierlake.internal.CasAlterHandler"


def test_concurrent_commits_to_one_table_all_land_once(spark, table):
    writers, commits = 4, 6
    errors = []
    start = threading.Barrier(writers)

    def write(w: int) -> None:
        try:
            start.wait(60)
            for i in range(commits):
                spark.sql(f"INSERT INTO {table} VALUES ({w * 100 + i})")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    spark.sql(f"REFRESH TABLE {table}")
    ids = sorted(r.id for r in spark.table(table).collect())
    assert ids == sorted(w * 100 + i for w in range(writers) for i in range(commits))
    snapshots = spark.sql(f"SELECT snapshot_id, parent_id FROM {table}.snapshots").collect()
    assert len(snapshots) == writers * commits
    # One chain: every commit was based on the one before it, none overwrote another.
    assert len({s.parent_id for s in snapshots}) == writers * commits


def alter(spark, table, change, context=None):
    client, jvm = metastore_client(spark)
    db, name = table.split(".")
    try:
        hms_table = client.getTable(db, name)
        params = hms_table.getParameters()
        change(params)
        env = jvm.org.apache.hadoop.hive.metastore.api.EnvironmentContext()
        for k, v in (context or {}).items():
            env.putToProperties(k, v)
        client.alter_table_with_environmentContext(db, name, hms_table, env)
    finally:
        client.close()


def current_location(spark, table):
    client, _ = metastore_client(spark)
    try:
        return client.getTable(*table.split(".")).getParameters().get("metadata_location")
    finally:
        client.close()


def test_a_commit_on_stale_metadata_is_refused_with_icebergs_message(spark, table):
    location = current_location(spark, table)
    with pytest.raises(Exception, match="The table has been modified. The parameter value for key "
                                        "'metadata_location' is '" + location):
        alter(spark, table, lambda p: p.put("metadata_location", location + ".next"),
              {"expected_parameter_key": "metadata_location", "expected_parameter_value": location + ".stale"})
    assert current_location(spark, table) == location
    # A client that still locks is held to its previous_metadata_location.
    with pytest.raises(Exception, match="The table has been modified"):
        alter(spark, table, lambda p: (p.put("metadata_location", location + ".next"),
                                       p.put("previous_metadata_location", location + ".stale")))
    assert current_location(spark, table) == location
    assert sorted(r.id for r in spark.table(table).collect()) == []


def test_changes_that_keep_the_metadata_pass(spark, table):
    location = current_location(spark, table)
    alter(spark, table, lambda p: p.put("comment", "kept"))  # a property change, not a commit
    alter(spark, table, lambda p: p.put("comment", "again"),
          {"expected_parameter_key": "metadata_location", "expected_parameter_value": location})
    # The same commit sent again (the metastore retries a call Derby failed): it already landed.
    alter(spark, table, lambda p: p.put("comment", "resent"),
          {"expected_parameter_key": "metadata_location", "expected_parameter_value": location + ".before"})
    assert current_location(spark, table) == location
    spark.sql(f"INSERT INTO {table} VALUES (7)")
    assert [r.id for r in spark.table(table).collect()] == [7]


def _thread_metastore(spark):
    """This thread's Derby RawStore and Hive client (Hive keeps one of each per thread)."""
    jvm = spark.sparkContext._jvm
    out = []
    for cls, field in (("org.apache.hadoop.hive.metastore.HiveMetaStore$HMSHandler", "threadLocalMS"),
                       ("org.apache.hadoop.hive.ql.metadata.Hive", "hiveDB")):
        f = jvm.java.lang.Class.forName(cls).getDeclaredField(field)
        f.setAccessible(True)
        value = f.get(None).get()
        out.append(None if value is None else jvm.java.lang.System.identityHashCode(value))
    return tuple(out)


def test_a_thrift_session_leaves_a_server_threads_metastore_client_alone(spark, server, table):
    # The Thrift Server runs statements as the server's user (hive.server2.enable.doAs=false):
    # as the gateway's proxy user, a new session made Hive rebuild the metastore client and
    # the RawStore of the server's threads too (a new HiveConf, ~20-50 ms of CPU each time).
    from pyhive import hive

    assert spark.catalog.tableExists(table)
    before = _thread_metastore(spark)
    assert None not in before
    for n in range(2):
        conn = hive.connect("127.0.0.1", server.gateway.port, username=f"tester{n}")
        try:
            cursor = conn.cursor()
            cursor.execute(f"INSERT INTO {table} VALUES ({n})")
            cursor.execute(f"SELECT count(*) FROM {table}")
            assert cursor.fetchall() == [(n + 1,)]
        finally:
            conn.close()
        assert spark.catalog.tableExists(table)
        assert _thread_metastore(spark) == before


def test_a_stale_copy_of_a_table_sent_back_is_refused_and_the_data_stays(spark, table):
    """A table with one metadata file has no previous_metadata_location: an alter made from a copy
    read before an INSERT would move metadata_location back and lose the INSERT."""
    client, _ = metastore_client(spark)
    db, name = table.split(".")
    try:
        stale = client.getTable(db, name)
        assert stale.getParameters().get("previous_metadata_location") is None
        spark.sql(f"INSERT INTO {table} VALUES (1)")
        stale.getParameters().put("comment", "from an old read")
        with pytest.raises(Exception, match="Refused: this alter of .* would set metadata_location to .* "
                                            "does not name it as previous_metadata_location"):
            client.alter_table(db, name, stale)
    finally:
        client.close()
    spark.sql(f"REFRESH TABLE {table}")
    assert [r.id for r in spark.table(table).collect()] == [1]


def test_spark_property_changes_and_renames_still_work(spark, table):
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('team'='kept', 'write.format.default'='parquet')")
    renamed = table + "_renamed"
    spark.sql(f"ALTER TABLE {table} RENAME TO {renamed}")
    try:
        spark.sql(f"INSERT INTO {renamed} VALUES (2)")
        assert sorted(r.id for r in spark.table(renamed).collect()) == [1, 2]
        assert spark.sql(f"SHOW TBLPROPERTIES {renamed} ('team')").collect()[0].value == "kept"
        # A Hive-level alter made from a fresh read (Spark v1 / Hive / Trino property changes) passes.
        alter(spark, renamed, lambda p: p.put("owner_note", "fresh"))
        spark.sql(f"INSERT INTO {renamed} VALUES (3)")
        assert sorted(r.id for r in spark.table(renamed).collect()) == [1, 2, 3]
    finally:
        spark.sql(f"ALTER TABLE {renamed} RENAME TO {table}")
