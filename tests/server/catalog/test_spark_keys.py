"""Key equality as Spark groups (server/catalog/java/SparkKeys.java), driven from pytest and
compared with Spark's own GROUP BY: the ingest group commit, its INSERT-time checks and the fresh
view's local merge decide "the same key" with this class, the round with Spark's SQL."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

# Two values of one type each: the class must say "same key" exactly when Spark's GROUP BY does.
PAIRS = [
    ("X'AA'", "X'AA'"), ("X'AA'", "X'AB'"), ("X''", "X'00'"),
    ("CAST(-0.0 AS DOUBLE)", "CAST(0.0 AS DOUBLE)"), ("CAST('NaN' AS DOUBLE)", "CAST('NaN' AS DOUBLE)"),
    ("CAST('NaN' AS DOUBLE)", "CAST('Infinity' AS DOUBLE)"), ("CAST(-0.0 AS FLOAT)", "CAST(0.0 AS FLOAT)"),
    ("CAST('NaN' AS FLOAT)", "CAST('NaN' AS FLOAT)"),
    ("CAST(1.5 AS DECIMAL(10,2))", "CAST(1.50 AS DECIMAL(10,2))"),
    ("CAST(1.5 AS DECIMAL(38,10))", "CAST(1.51 AS DECIMAL(38,10))"),
    ("'a'", "'a'"), ("'a'", "'A'"), ("'a'", "'a '"),
    ("DATE'2024-01-01'", "DATE'2024-01-01'"), ("TIMESTAMP'2024-01-01 00:00:00'", "TIMESTAMP'2024-01-01 00:00:01'"),
    ("TIMESTAMP_NTZ'2024-01-01 00:00:00'", "TIMESTAMP_NTZ'2024-01-01 00:00:00'"),
    ("true", "false"), ("CAST(7 AS TINYINT)", "CAST(7 AS TINYINT)"), ("9223372036854775807L", "-9223372036854775808L"),
    ("array(-0.0D, 1.0D)", "array(0.0D, 1.0D)"), ("array(X'01')", "array(X'01')"), ("array(X'01')", "array(X'02')"),
    ("named_struct('a', X'01', 'b', -0.0D)", "named_struct('a', X'01', 'b', 0.0D)"),
    ("named_struct('a', CAST('NaN' AS DOUBLE))", "named_struct('a', CAST('NaN' AS DOUBLE))"),
]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_two_values_are_one_key_exactly_when_sparks_group_by_says_so(spark, a, b):
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    frame = spark.sql(f"SELECT {a} AS k UNION ALL SELECT {b} AS k")
    spark_groups = spark.sql(f"SELECT k FROM (SELECT {a} AS k UNION ALL SELECT {b} AS k) GROUP BY k").count()
    rows = frame._jdf.queryExecution().toRdd().collect()
    positions = gateway.new_array(jvm.int, 1)
    types = gateway.new_array(jvm.org.apache.spark.sql.types.DataType, 1)
    types[0] = frame._jdf.schema().fields()[0].dataType()
    keys = jvm.io.tierlake.internal.SparkKeys
    first, second = keys.key(rows[0], positions, types), keys.key(rows[1], positions, types)
    same = bool(first.equals(second))
    assert same == (spark_groups == 1), (a, b, str(first), str(second), spark_groups)
    if same:
        assert first.hashCode() == second.hashCode()
