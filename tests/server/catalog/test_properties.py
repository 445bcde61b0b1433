"""Table properties are checked before anything is created or changed, and
primary keys cannot be NULL (issue 16, items 6 and 2).

Every user-facing property gets a bad value at CREATE, ALTER … SET
TBLPROPERTIES, CALL sys.enable_tiering and CREATE … AS SELECT (gateway and
CALL forms); the client sees an error naming the property and the value, and
nothing exists afterwards: no stream table, no lake table, no coordinator
row, no CTAS journal row, no changed property.
"""

from __future__ import annotations

import uuid

import pytest
from pyhive import exc

from tierlake.server.catalog import properties
from tierlake.server.catalog.spec import Column, TieredSpec, partition_sql
from tierlake.server.exceptions import InvalidArgumentError

COLUMNS = [Column("k", "BIGINT"), Column("ts", "TIMESTAMP"), Column("v", "STRING")]

# (property, bad value, what the error says besides the property and the value)
BAD = [
    (properties.ENABLED, "yes", "expected 'true' or 'false'"),
    (properties.PRIMARY_KEY, "nope", "'nope' is not a column of the table"),
    (properties.PRIMARY_KEY, "k, k", "a column is named twice"),
    (properties.BUCKETS, "0", "out of range; expected a whole number from 1 to 1024 such as '4'"),
    (properties.BUCKETS, "many", "expected a whole number from 1 to 1024"),
    (properties.SEQUENCE_BY, "nope", "'nope' is not a column of the table"),
    (properties.FRESHNESS_PROPERTY, "soon", "expected a duration of at least 1 s such as '1 min' or '30 s'"),
    (properties.FRESHNESS_PROPERTY, "5", "a duration needs a unit (ms, s, min, h, d)"),
    (properties.FRESHNESS_PROPERTY, "0 s", "shorter than the minimum; expected a duration of at least 1 s"),
    (properties.FRESHNESS_PROPERTY, "500 ms", "shorter than the minimum"),
    (properties.LAKE_PARTITION, "days(ts", "cannot read 'days(ts'"),
    (properties.LAKE_PARTITION, "days(nope)", "'nope' is not a column of the table"),
    (properties.MAX_ROUND, "long", "expected a duration such as '10 min'"),
    (properties.CHUNK_ROWS, "0", "out of range; expected a whole number of at least 1"),
    (properties.QUALITY, "strict", "expected one of 'off', 'warn', 'block'"),
    (properties.SNAPSHOT_MAX_AGE, "forever", "expected a duration such as '1 d' or '6 h'"),
    (properties.SNAPSHOT_MIN_RETAINED, "0", "out of range; expected a whole number of at least 1"),
    (properties.STREAM_MAX_SNAPSHOTS, "0", "out of range; expected a whole number of at least 1"),
    (properties.AUTO_COMPACTION, "sometimes", "expected 'true' or 'false'"),
    (properties.LOG_TTL, "forever", "expected a duration such as '7 d'"),
    (properties.SNAPSHOT_INTERVAL, "often", "expected a duration such as '10 min' or '0'"),
    (properties.NUM_RETAINED, "0", "out of range; expected a whole number of at least 1"),
    (properties.FORMAT_VERSION, "9", "out of range; expected a whole number from 1 to 3"),
]
BAD_IDS = [f"{key}={value}" for key, value, _ in BAD]
USER_KEYS = sorted(p.key for p in properties.TABLE_PROPERTIES if not p.internal)


# -- unit (no JVM) -------------------------------------------------------------


def test_every_user_property_has_a_bad_case_and_an_example():
    assert sorted({key for key, _, _ in BAD}) == USER_KEYS
    assert all(properties.BY_KEY[key].example for key in USER_KEYS)


@pytest.mark.parametrize("key, value, why", BAD, ids=BAD_IDS)
def test_a_bad_value_names_the_property_the_value_and_what_is_expected(key, value, why):
    props = {properties.ENABLED: "true", properties.PRIMARY_KEY: "k", key: value}
    with pytest.raises(InvalidArgumentError) as info:
        properties.validate(props, COLUMNS)
    assert info.value.message.startswith(f"invalid value {value!r} for table property '{key}': ")
    assert why in info.value.message


def test_the_issue_example():
    with pytest.raises(InvalidArgumentError, match=r"^invalid value 'soon' for table property "
                       r"'table\.datalake\.freshness': expected a duration of at least 1 s such as '1 min' or '30 s'$"):
        properties.validate({"table.datalake.freshness": "soon"})


def test_good_values_pass():
    properties.validate({
        properties.ENABLED: "TRUE", properties.PRIMARY_KEY: "K, ts", properties.BUCKETS: "1024",
        properties.SEQUENCE_BY: "ts", properties.FRESHNESS_PROPERTY: "1 s", properties.LAKE_PARTITION:
        "days(ts), bucket(4, k), truncate(2, v), v", properties.MAX_ROUND: "10 min", properties.CHUNK_ROWS: "1",
        properties.QUALITY: "Block", properties.LOG_TTL: "7 d", properties.SNAPSHOT_INTERVAL: "0",
        properties.NUM_RETAINED: "1", properties.FORMAT_VERSION: "2",
        # not ours: Iceberg's, a user's own
        "write.target-file-size-bytes": "x", "owner": "me", "table.comment": "anything",
    }, COLUMNS)


def test_columns_are_only_checked_when_known():
    properties.validate({properties.PRIMARY_KEY: "a, b", properties.SEQUENCE_BY: "c",
                         properties.LAKE_PARTITION: "days(d)"})
    with pytest.raises(InvalidArgumentError, match="'primary-key'"):
        properties.validate({properties.PRIMARY_KEY: "a b"})  # not a name, columns or not


def test_sequence_by_needs_a_primary_key():
    with pytest.raises(InvalidArgumentError, match="'sequence-by' needs a 'primary-key'"):
        properties.validate({properties.SEQUENCE_BY: "ts"}, COLUMNS)


@pytest.mark.parametrize("key, suggestion", [
    ("table.datalake.freshnes", "table.datalake.freshness"),
    ("table.datalake.enable", "table.datalake.enabled"),
    ("table.datalake.partitions", "table.datalake.partition"),
    ("table.datalake.max-round-duration", "table.datalake.tiering.max-round-duration"),
    ("table.datalake.tiering.chunkrows", "table.datalake.tiering.chunk-rows"),
    ("kv.snapshot.retained", "kv.snapshot.num-retained"),
    ("kv.snapshots.interval", "kv.snapshot.interval"),
    ("table.log.tll", "table.log.ttl"),
])
def test_an_unknown_key_gets_a_did_you_mean(key, suggestion):
    with pytest.raises(InvalidArgumentError) as info:
        properties.validate({key: "1"})
    assert info.value.message == f"unknown table property '{key}'; did you mean '{suggestion}'?"


@pytest.mark.parametrize("key, suggestion", [
    ("primary_key", "primary-key"), ("Primary.Key", "primary-key"), ("primary-keys", "primary-key"),
    ("bucket_num", "bucket.num"), ("bucket.number", "bucket.num"), ("sequence_by", "sequence-by"),
])
def test_a_key_that_looks_like_a_property_gets_a_did_you_mean(key, suggestion):
    with pytest.raises(InvalidArgumentError) as info:
        properties.validate({key: "id"})
    assert info.value.message == f"unknown table property '{key}'; did you mean '{suggestion}'?"
    assert properties.governed(key)


@pytest.mark.parametrize("key", ["write.format.default", "owner", "comment", "write.target-file-size-bytes",
                                 "my.team"])
def test_other_keys_pass(key):
    properties.validate({key: "x"})
    assert properties.lookalike(key) is None


def test_a_create_with_tiering_keys_but_no_switch_is_refused_with_the_typo_named():
    from tierlake.server.gateway.routing.ddl import parse_tiered_create

    with pytest.raises(InvalidArgumentError) as info:
        parse_tiered_create("CREATE TABLE d.t (id BIGINT) TBLPROPERTIES ('table.datalake.enable'='true')")
    assert info.value.message == ("unknown table property 'table.datalake.enable'; "
                                  "did you mean 'table.datalake.enabled'?")
    with pytest.raises(InvalidArgumentError) as info:
        parse_tiered_create("CREATE TABLE d.t (id BIGINT) TBLPROPERTIES ('table.datalake.freshness'='1 min')")
    assert "configure tiering, but the table sets neither 'table.datalake.enabled'='true' nor USING iceberg, so " \
        "Spark would make a plain Hive table of it" in info.value.message
    # An Iceberg table to enable later keeps them (sys.enable_tiering reads them), once they are spelt right.
    assert parse_tiered_create("CREATE TABLE d.t (k BIGINT) USING iceberg TBLPROPERTIES ('primary-key'='k')") is None
    with pytest.raises(InvalidArgumentError, match="did you mean 'primary-key'"):
        parse_tiered_create("CREATE TABLE d.t (k BIGINT) USING iceberg TBLPROPERTIES ('primary_key'='k')")
    create = parse_tiered_create("CREATE TABLE d.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                                 "'primary_key'='id')")
    with pytest.raises(InvalidArgumentError, match="did you mean 'primary-key'"):
        properties.validate(create.properties, create.columns)  # what the gateway runs before creating
    # Plain tables stay Spark's: no tiering keys, or tiering switched off on purpose.
    assert parse_tiered_create("CREATE TABLE d.t (bucket BIGINT) USING iceberg TBLPROPERTIES ('owner'='x')") is None
    assert parse_tiered_create("CREATE TABLE d.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='false', "
                               "'bucket.num'='4')") is None


def test_an_unknown_key_without_a_near_one_lists_the_known_ones():
    with pytest.raises(InvalidArgumentError) as info:
        properties.validate({"table.datalake.zzz": "1"})
    assert info.value.message.startswith("unknown table property 'table.datalake.zzz'; known properties under "
                                         "'table.datalake.': table.datalake.auto-compaction, table.datalake.enabled")


@pytest.mark.parametrize("key", ["tierlake.lake-table", "tierlake.log.start-position", "tierlake.anything"])
def test_tierlake_bookkeeping_cannot_be_set(key):
    with pytest.raises(InvalidArgumentError, match=f"table property '{key}' is tierlake's own bookkeeping"):
        properties.validate({key: "x"})
    assert properties.user_properties({key: "x", "primary-key": "k"}) == {"primary-key": "k"}


def test_creating_checks_the_registry_first():
    with pytest.raises(InvalidArgumentError, match="invalid value 'soon' for table property"):
        TieredSpec.from_properties({"table.datalake.freshness": "soon"}, COLUMNS)
    # Reading a stored table's spec (no columns) does not re-check everything,
    # and an existing table's own bookkeeping is not refused.
    TieredSpec.from_properties({"table.datalake.freshness": "soon", "tierlake.lake-table": "a.b"})
    TieredSpec.from_properties({"tierlake.lake-table": "a.b", "primary-key": "k"}, COLUMNS)


@pytest.mark.parametrize("text, sql", [("days(ts)", "days(`ts`)"), ("bucket(4, id)", "bucket(4, `id`)"),
                                       ("identity(v)", "`v`"), ("V", "`v`")])
def test_partition_transforms_still_render(text, sql):
    assert partition_sql(text) == sql


@pytest.mark.parametrize("bad", ["bucket(0, id)", "truncate(2, `x`)", "days()"])
def test_partition_transforms_are_strict(bad):
    with pytest.raises(InvalidArgumentError):
        partition_sql(bad)


# -- integration (gateway) -----------------------------------------------------


def error_of(cursor, statement: str) -> str:
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
    return info.value.args[0].status.errorMessage


def tblproperties(props: dict[str, str]) -> str:
    return ", ".join(f"'{k}'='{v}'" for k, v in props.items())


def registered(server, table: str) -> bool:
    _, states = server.coordinator.load()
    return any(s.path == table for s in states.values())


def assert_nothing_created(server, spark, db: str, name: str) -> None:
    assert not spark.catalog.tableExists(f"{db}.{name}")
    assert not spark.catalog.tableExists(f"{db}_lake.{name}")
    assert not registered(server, f"{db}.{name}")
    assert spark.table("sys.ctas_journal").where(f"database_name = '{db}' AND table_name = '{name}'").count() == 0


@pytest.fixture(scope="module")
def db(spark):
    name = "tp_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE `{name}`")
    return name


def bad_props(key: str, value: str) -> dict[str, str]:
    return {properties.ENABLED: "true", properties.PRIMARY_KEY: "k", key: value}


def expect_refusal(message: str, key: str, value: str, why: str) -> None:
    assert f"invalid value {value!r} for table property '{key}'" in message
    assert why in message


@pytest.mark.parametrize("key, value, why", BAD, ids=BAD_IDS)
def test_create_refuses_a_bad_property(server, spark, hive_cursor, db, key, value, why):
    name = "c_" + uuid.uuid4().hex[:6]
    message = error_of(hive_cursor, f"CREATE TABLE {db}.{name} (k BIGINT, ts TIMESTAMP, v STRING) "
                                    f"TBLPROPERTIES ({tblproperties(bad_props(key, value))})")
    expect_refusal(message, key, value, why)
    assert_nothing_created(server, spark, db, name)


@pytest.mark.parametrize("key, value, why", BAD, ids=BAD_IDS)
def test_ctas_refuses_a_bad_property(server, spark, hive_cursor, db, key, value, why):
    name = "a_" + uuid.uuid4().hex[:6]
    query = "SELECT id AS k, current_timestamp() AS ts, CAST(id AS STRING) AS v FROM range(3)"
    message = error_of(hive_cursor, f"CREATE TABLE {db}.{name} TBLPROPERTIES ({tblproperties(bad_props(key, value))}) "
                                    f"AS {query}")
    expect_refusal(message, key, value, why)
    assert_nothing_created(server, spark, db, name)
    props = ", ".join(f"'{k}', '{v}'" for k, v in bad_props(key, value).items())
    message = error_of(hive_cursor, f"CALL sys.create_table_as('{db}.{name}', '{query}', map({props}))")
    expect_refusal(message, key, value, why)
    assert_nothing_created(server, spark, db, name)


@pytest.fixture(scope="module")
def tiered(server, spark, db):
    """One tiered primary-key table the ALTER cases try to change."""
    from pyhive import hive

    conn = hive.connect("127.0.0.1", server.gateway.port, username="tester")
    conn.cursor().execute(f"CREATE TABLE {db}.tiered (k BIGINT, ts TIMESTAMP, v STRING) TBLPROPERTIES "
                          "('table.datalake.enabled'='true', 'primary-key'='k', 'table.datalake.freshness'='1 h')")
    conn.close()
    return f"{db}.tiered"


def stored_properties(spark, table: str) -> dict[str, str]:
    from tierlake.server.catalog.table_path import parse_table_path
    from tierlake.server.coordinator.registration import iceberg_properties

    return iceberg_properties(spark, parse_table_path(table))


# format-version: Iceberg checks an ALTER of it itself; the gateway leaves it alone.
ALTER_BAD = [b for b in BAD if b[0] != properties.FORMAT_VERSION]


@pytest.mark.parametrize("key, value, why", ALTER_BAD, ids=[f"{k}={v}" for k, v, _ in ALTER_BAD])
def test_alter_refuses_a_bad_property(server, spark, hive_cursor, tiered, key, value, why):
    before = stored_properties(spark, tiered)
    message = error_of(hive_cursor, f"ALTER TABLE {tiered} SET TBLPROPERTIES ('{key}'='{value}')")
    expect_refusal(message, key, value, why)
    assert stored_properties(spark, tiered) == before


def test_alter_names_the_typo_and_refuses_bookkeeping(spark, hive_cursor, tiered):
    before = stored_properties(spark, tiered)
    message = error_of(hive_cursor, f"ALTER TABLE {tiered} SET TBLPROPERTIES ('table.datalake.freshnes'='1 s')")
    assert "unknown table property 'table.datalake.freshnes'; did you mean 'table.datalake.freshness'?" in message
    message = error_of(hive_cursor, f"ALTER TABLE {tiered} SET TBLPROPERTIES ('tierlake.lake-table'='x.y')")
    assert "table property 'tierlake.lake-table' is tierlake's own bookkeeping" in message
    assert stored_properties(spark, tiered) == before


def test_alter_checks_the_change_with_the_table_s_other_properties(spark, hive_cursor, db):
    hive_cursor.execute(f"CREATE TABLE {db}.logs (id BIGINT, ts TIMESTAMP) TBLPROPERTIES "
                        "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
    message = error_of(hive_cursor, f"ALTER TABLE {db}.logs SET TBLPROPERTIES ('sequence-by'='ts')")
    assert "table property 'sequence-by' needs a 'primary-key'" in message
    hive_cursor.execute(f"ALTER TABLE {db}.logs SET TBLPROPERTIES ('table.datalake.freshness'='2 h')")
    assert stored_properties(spark, f"{db}.logs")["table.datalake.freshness"] == "2 h"


ENABLE_BAD = [b for b in BAD if b[0] != properties.FORMAT_VERSION]  # Iceberg refuses it at CREATE already


@pytest.mark.parametrize("key, value, why", ENABLE_BAD, ids=[f"{k}={v}" for k, v, _ in ENABLE_BAD])
def test_enable_tiering_refuses_a_bad_property(server, spark, hive_cursor, db, key, value, why):
    name = "e_" + uuid.uuid4().hex[:6]
    props = {properties.PRIMARY_KEY: "k", key: value}
    # A plain Iceberg table, made by Spark (the gateway would refuse the value).
    spark.sql(f"CREATE TABLE {db}.{name} (k BIGINT NOT NULL, ts TIMESTAMP, v STRING) USING iceberg "
              f"TBLPROPERTIES ({tblproperties(props)})")
    before = stored_properties(spark, f"{db}.{name}")
    message = error_of(hive_cursor, f"CALL sys.enable_tiering('{db}.{name}')")
    expect_refusal(message, key, value, why)
    assert stored_properties(spark, f"{db}.{name}") == before
    assert [f.name for f in spark.table(f"{db}.{name}").schema.fields] == ["k", "ts", "v"]  # no _change_type
    assert not spark.catalog.tableExists(f"{db}_lake.{name}")
    assert not registered(server, f"{db}.{name}")


def test_enable_tiering_names_a_typo(server, spark, hive_cursor, db):
    spark.sql(f"CREATE TABLE {db}.typo (id BIGINT) USING iceberg TBLPROPERTIES ('table.datalake.freshnes'='1 min')")
    message = error_of(hive_cursor, f"CALL sys.enable_tiering('{db}.typo')")
    assert "unknown table property 'table.datalake.freshnes'; did you mean 'table.datalake.freshness'?" in message
    assert not registered(server, f"{db}.typo")


def test_create_names_a_typo(server, spark, hive_cursor, db):
    message = error_of(hive_cursor, f"CREATE TABLE {db}.typo2 (id BIGINT) TBLPROPERTIES "
                                    "('table.datalake.enabled'='true', 'table.datalake.freshnes'='1 min')")
    assert "unknown table property 'table.datalake.freshnes'; did you mean 'table.datalake.freshness'?" in message
    message = error_of(hive_cursor, f"CREATE TABLE {db}.typo2 (id BIGINT) TBLPROPERTIES "
                                    "('table.datalake.enabled'='true', 'tierlake.lake-table'='x.y')")
    assert "table property 'tierlake.lake-table' is tierlake's own bookkeeping" in message
    assert_nothing_created(server, spark, db, "typo2")
    # A misspelt switch, or a misspelt key, never makes a plain (Hive text) table instead.
    message = error_of(hive_cursor, f"CREATE TABLE {db}.typo2 (id BIGINT) TBLPROPERTIES "
                                    "('table.datalake.enable'='true')")
    assert "unknown table property 'table.datalake.enable'; did you mean 'table.datalake.enabled'?" in message
    message = error_of(hive_cursor, f"CREATE TABLE {db}.typo2 (id BIGINT) TBLPROPERTIES "
                                    "('table.datalake.enabled'='true', 'primary_key'='id')")
    assert "unknown table property 'primary_key'; did you mean 'primary-key'?" in message
    assert_nothing_created(server, spark, db, "typo2")
    assert not spark.catalog.tableExists(f"{db}.typo2")


def test_good_values_of_every_property_create_the_table(server, spark, hive_cursor, db):
    hive_cursor.execute(
        f"CREATE TABLE {db}.good (k BIGINT, ts TIMESTAMP, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
        "'primary-key'='k', 'bucket.num'='2', 'sequence-by'='ts', 'table.datalake.freshness'='1 h', "
        "'table.datalake.partition'='days(ts)', 'table.datalake.tiering.max-round-duration'='10 min', "
        "'table.datalake.tiering.chunk-rows'='1000', 'table.datalake.quality'='warn', 'table.log.ttl'='7 d', "
        "'kv.snapshot.interval'='0', 'kv.snapshot.num-retained'='2', 'format-version'='2')")
    assert spark.catalog.tableExists(f"{db}.good") and spark.catalog.tableExists(f"{db}_lake.good")
    assert registered(server, f"{db}.good")


# -- NOT NULL keys -------------------------------------------------------------


def required(spark, table: str, column: str) -> bool:
    from tierlake.server.runtime.session import iceberg_table

    return bool(iceberg_table(spark, table).schema().findField(column).isRequired())


# Spark 3.5 folds a constant NULL into its not-null check while planning and
# reports the NullPointerException as an internal error (docs/tiering.md).
NULL_LITERAL_ERROR = "[INTERNAL_ERROR] The Spark SQL phase optimization failed"


def test_key_columns_are_created_not_null_and_refuse_a_null_key(server, spark, hive_cursor, db):
    hive_cursor.execute(f"CREATE TABLE {db}.pk (a BIGINT COMMENT 'part one', b STRING, v STRING) TBLPROPERTIES "
                        "('table.datalake.enabled'='true', 'primary-key'='a, b')")
    for table in (f"{db}.pk", f"{db}_lake.pk"):
        assert required(spark, table, "a") and required(spark, table, "b") and not required(spark, table, "v")
    # Refused at INSERT with the count and the key (docs/ingest.md), not Spark's internal error.
    message = error_of(hive_cursor, f"INSERT INTO {db}.pk (a, b, v, _change_type) VALUES (1, NULL, 'x', '+I')")
    assert f"INSERT into {db}.pk refused: 1 row(s) with a NULL key column (a, b)" in message, message
    message = error_of(hive_cursor, f"INSERT INTO {db}.pk SELECT IF(id = 1, NULL, id), 'b', 'v', NULL FROM range(3)")
    assert f"INSERT into {db}.pk refused: a row has a NULL key column (a, b)" in message, message
    # Spark's own NOT NULL check still stands for writers that bypass the gateway.
    with pytest.raises(Exception) as spark_error:
        spark.sql(f"INSERT INTO {db}.pk (a, b, v, _change_type) VALUES (1, NULL, 'x', '+I')")
    assert NULL_LITERAL_ERROR in str(spark_error.value)
    hive_cursor.execute(f"INSERT INTO {db}.pk (a, b, v, _change_type) VALUES (1, 'b', 'x', '+I')")
    hive_cursor.execute(f"SELECT count(*) FROM {db}.pk")
    assert hive_cursor.fetchall() == [(1,)]


def test_ctas_keys_are_not_null(server, spark, hive_cursor, db):
    hive_cursor.execute(f"CREATE TABLE {db}.ck TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='k') "
                        "AS SELECT id AS k, 'x' AS v FROM range(3)")
    assert required(spark, f"{db}.ck", "k") and required(spark, f"{db}_lake.ck", "k")
    message = error_of(hive_cursor, f"CREATE TABLE {db}.cn TBLPROPERTIES ('table.datalake.enabled'='true', "
                                    "'primary-key'='k') AS SELECT IF(id = 1, NULL, id) AS k FROM range(3)")
    assert "the query yields a NULL in the key column(s) k; key columns must not be NULL" in message, message
    assert not spark.catalog.tableExists(f"{db}.cn") and not spark.catalog.tableExists(f"{db}_lake.cn")
    assert not registered(server, f"{db}.cn")
    journal = spark.table("sys.ctas_journal").where(f"database_name = '{db}' AND table_name = 'cn'").collect()
    assert [r["state"] for r in journal] == ["aborted"]


def test_enable_tiering_refuses_null_keys_with_their_count(server, spark, hive_cursor, db):
    hive_cursor.execute(f"CREATE TABLE {db}.nk (a BIGINT, b STRING, v STRING) USING iceberg "
                        "TBLPROPERTIES ('primary-key'='a, b')")
    hive_cursor.execute(f"INSERT INTO {db}.nk VALUES (1, 'x', 'v'), (NULL, 'y', 'v'), (2, NULL, 'v'), (3, 'z', NULL)")
    message = error_of(hive_cursor, f"CALL sys.enable_tiering('{db}.nk')")
    assert f"table {db}.nk has 2 row(s) with a NULL in its primary key (a, b); delete or fix them" in message
    assert not registered(server, f"{db}.nk") and not spark.catalog.tableExists(f"{db}_lake.nk")
    assert properties.ENABLED not in stored_properties(spark, f"{db}.nk")
    assert not required(spark, f"{db}.nk", "a")

    hive_cursor.execute(f"DELETE FROM {db}.nk WHERE a IS NULL OR b IS NULL")
    hive_cursor.execute(f"CALL sys.enable_tiering('{db}.nk')")
    assert registered(server, f"{db}.nk")
    for table in (f"{db}.nk", f"{db}_lake.nk"):
        assert required(spark, table, "a") and required(spark, table, "b") and not required(spark, table, "v")
    message = error_of(hive_cursor,
                       f"INSERT INTO {db}.nk SELECT id, IF(id = 1, NULL, 'b'), 'v', NULL FROM range(2)")
    assert f"INSERT into {db}.nk refused: a row has a NULL key column (a, b)" in message, message
    hive_cursor.execute(f"SELECT count(*) FROM {db}.nk")
    assert hive_cursor.fetchall() == [(2,)]


def test_enable_tiering_of_a_log_table_allows_nulls(server, spark, hive_cursor, db):
    hive_cursor.execute(f"CREATE TABLE {db}.lg (id BIGINT) USING iceberg")
    hive_cursor.execute(f"INSERT INTO {db}.lg VALUES (NULL), (1)")
    hive_cursor.execute(f"CALL sys.enable_tiering('{db}.lg')")
    assert registered(server, f"{db}.lg") and not required(spark, f"{db}.lg", "id")
