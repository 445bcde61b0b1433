"""The embedded metastore's read cache (server/metastore/java/CachingObjectStore.java):
tables and databases are answered from memory while their row is unchanged, and
every change made through the metastore is seen by the next read; and a replaced
view's text (server/metastore/java/SessionViews.java)."""

from __future__ import annotations

import threading
import uuid

import pytest

pytestmark = pytest.mark.integration


def stats(spark) -> tuple[int, int]:
    hits, misses = spark.sparkContext._jvm.io.tierlake.internal.CachingObjectStore.stats().split()
    return int(hits), int(misses)


def properties(spark, db: str) -> dict[str, str]:
    rows = spark.sql(f"DESCRIBE DATABASE EXTENDED {db}").collect()
    return {r[0]: r[1] for r in rows}


def test_a_database_read_twice_is_answered_from_memory(spark):
    db = f"cos_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {db}")
    try:
        catalog = spark._jsparkSession.sessionState().catalog()
        catalog.databaseExists(db)
        hits, misses = stats(spark)
        for _ in range(5):
            assert catalog.databaseExists(db)
        after_hits, after_misses = stats(spark)
        assert after_hits - hits >= 5
        assert after_misses == misses
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def test_every_change_to_a_database_is_seen_by_the_next_read(spark):
    db = f"cos_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {db} COMMENT 'first'")
    assert properties(spark, db)["Comment"] == "first"
    spark.sql(f"ALTER DATABASE {db} SET DBPROPERTIES ('owner_team' = 'a')")
    assert "(owner_team,a)" in properties(spark, db)["Properties"]
    spark.sql(f"ALTER DATABASE {db} SET DBPROPERTIES ('owner_team' = 'b')")
    assert "(owner_team,b)" in properties(spark, db)["Properties"]
    spark.sql(f"DROP DATABASE {db}")
    assert not spark._jsparkSession.sessionState().catalog().databaseExists(db)
    with pytest.raises(Exception, match="SCHEMA_NOT_FOUND|not found"):
        spark.sql(f"DESCRIBE DATABASE {db}")
    spark.sql(f"CREATE DATABASE {db} COMMENT 'second'")
    try:
        assert properties(spark, db)["Comment"] == "second"
        assert "owner_team" not in properties(spark, db)["Properties"]
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def test_a_replaced_view_is_read_anew(spark):
    """A replaced view's metastore row changes (SessionViews.java writes the new text): the next
    query reads the new text, with its new columns. Before, Iceberg's Hive view operations left
    the first text and every query read the view's first version."""
    db = f"cos_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {db}")
    try:
        for value in (1, 2, 3):
            spark.sql(f"CREATE OR REPLACE VIEW {db}.v AS SELECT {value} AS x")
            assert spark.sql(f"SELECT x FROM {db}.v").collect()[0][0] == value
        spark.sql(f"CREATE OR REPLACE VIEW {db}.v AS SELECT 4 AS y, 'z' AS z")
        frame = spark.sql(f"SELECT * FROM {db}.v")
        assert frame.columns == ["y", "z"]
        assert [tuple(r) for r in frame.collect()] == [(4, "z")]
        spark.sql(f"DROP VIEW {db}.v")
        spark.sql(f"CREATE VIEW {db}.v AS SELECT 5 AS w")
        assert [tuple(r) for r in spark.sql(f"SELECT * FROM {db}.v").collect()] == [(5,)]
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def test_racing_replaces_leave_the_text_of_the_version_in_force(spark):
    db = f"cos_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE VIEW {db}.v AS SELECT 0 AS x")
    errors = []

    def replace(w: int) -> None:
        try:
            for i in range(5):
                spark.sql(f"CREATE OR REPLACE VIEW {db}.v AS SELECT {w * 100 + i} AS x")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(str(e)[:1500])

    try:
        threads = [threading.Thread(target=replace, args=(w,)) for w in (1, 2, 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors
        in_force = spark._jsparkSession.sessionState().catalogManager().catalog("spark_catalog")
        namespace = spark.sparkContext._gateway.new_array(spark.sparkContext._jvm.java.lang.String, 1)
        namespace[0] = db
        identifier = spark.sparkContext._jvm.org.apache.spark.sql.connector.catalog.Identifier.of(namespace, "v")
        expected = int(in_force.loadView(identifier).query().split()[1])
        assert spark.sql(f"SELECT x FROM {db}.v").collect()[0][0] == expected
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
