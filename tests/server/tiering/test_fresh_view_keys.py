"""Fresh views over keys Spark compares by more than their Java identity (issue 50; docs/tiering.md, "Key
types"): BINARY (by content), ``-0.0``/``0.0`` and NaN, DECIMAL, composite keys of strings, timestamps
without time zone, booleans and small integers. The view's two forms, pending changes merged in the driver
(FreshMerge.java) and merged by Spark (its distributed form), and the lake after a round each equal what
plain Spark SQL gives over the same changes in a plain Iceberg table: per key (Spark's grouping), the
change of the newest commit, -U rows skipped, -D removing the key."""

from __future__ import annotations

import itertools
import re

import pytest

from tests.server.tiering.conftest import run
from tests.server.tiering.test_fresh_views import force_round, local_merge_rows

pytestmark = pytest.mark.integration

DB = "fresh_keys"
_counter = itertools.count()

NAN, NEG_ZERO = "CAST('NaN' AS DOUBLE)", "CAST('-0.0' AS DOUBLE)"

# (columns, primary key, commits): each commit a list of rows (the columns' SQL literals, then the change
# type). The first commit is tiered before the others are written; the rest stay pending.
CASES = {
    "binary": ("k BINARY, v STRING", "k", [
        [("X'AA'", "'a'", "NULL"), ("X'BB'", "'b'", "NULL"), ("X''", "'e'", "NULL")],
        [("X'AA'", "'a2'", "'+U'"), ("X'BB'", "'b'", "'-D'")],
        [("X'AA'", "'a3'", "'+U'"), ("X'CC'", "'c'", "'+I'"), ("X''", "'e2'", "'+U'")],
    ]),
    "signed_zero_nan": ("id INT, f DOUBLE, v STRING", "id, f", [
        [("1", "0.0D", "'a'", "NULL"), ("2", NAN, "'n'", "NULL"), ("3", NEG_ZERO, "'z'", "NULL")],
        [("1", NEG_ZERO, "'a2'", "'+U'"), ("2", NAN, "'n2'", "'+U'"), ("4", NEG_ZERO, "'p'", "'+I'")],
        [("4", "0.0D", "'p2'", "'+U'"), ("3", "0.0D", "'z'", "'-D'"), ("2", NAN, "'n3'", "'+U'")],
    ]),
    "decimal_binary": ("d DECIMAL(10, 2), b BINARY, v STRING", "d, b", [
        [("1.50", "X'01'", "'a'", "NULL"), ("-0.00", "X'02'", "'z'", "NULL")],
        [("1.5", "X'01'", "'a2'", "'+U'"), ("0", "X'02'", "'z2'", "'+U'"), ("1.5", "X'0102'", "'c'", "'+I'")],
        [("1.500", "X'01'", "'a3'", "'+U'")],
    ]),
    "composite": ("s STRING, ts TIMESTAMP_NTZ, bo BOOLEAN, t TINYINT, dt DATE, v STRING", "s, ts, bo, t, dt", [
        [("'x'", "TIMESTAMP_NTZ'2026-01-01 00:00:00'", "true", "1", "DATE'2026-01-01'", "'a'", "NULL"),
         ("'x'", "TIMESTAMP_NTZ'2026-01-01 00:00:00'", "false", "1", "DATE'2026-01-01'", "'b'", "NULL")],
        [("'x'", "TIMESTAMP_NTZ'2026-01-01 00:00:00'", "true", "1", "DATE'2026-01-01'", "'a2'", "'+U'"),
         ("'x'", "TIMESTAMP_NTZ'2026-01-01 00:00:00.000001'", "true", "1", "DATE'2026-01-01'", "'c'", "'+I'")],
        [("'x'", "TIMESTAMP_NTZ'2026-01-01 00:00:00'", "true", "1", "DATE'2026-01-01'", "'a3'", "'+U'"),
         ("'x'", "TIMESTAMP_NTZ'2026-01-01 00:00:00'", "false", "1", "DATE'2026-01-01'", "'b'", "'-D'")],
    ]),
}


def _shown(columns: str) -> str:
    """Every column as text, so that -0.0, NaN and bytes compare exactly (Python's NaN != NaN)."""
    out = []
    for c in re.split(r",\s*(?![^()]*\))", columns):  # not the comma of DECIMAL(10, 2)
        name, kind = c.split(" ", 1)
        out.append(f"hex({name})" if kind == "BINARY" else f"CAST({name} AS STRING)")
    return ", ".join(out)


def _rows(spark, query: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.sql(query).collect())


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_forms_and_the_lake_equal_plain_spark(hive_cursor, spark, case):
    columns, key, commits = CASES[case]
    name = f"{case}{next(_counter)}"
    run(hive_cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    run(hive_cursor, f"CREATE TABLE {DB}.{name} ({columns}) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     f"'table.datalake.freshness'='1 h', 'primary-key'='{key}', 'bucket.num'='2')")
    table, fresh, lake, ref = f"{DB}.{name}", f"{DB}_fresh.{name}", f"{DB}_lake.{name}", f"{DB}.{name}_plain"
    spark.sql(f"CREATE TABLE {ref} ({columns}, _change_type STRING, commit_no INT) USING iceberg")
    for n, commit in enumerate(commits):
        values = ", ".join(f"({', '.join(row)})" for row in commit)
        spark.sql(f"INSERT INTO {table} VALUES {values}")  # one stream commit (Spark's own write)
        spark.sql(f"INSERT INTO {ref} VALUES " + ", ".join(f"({', '.join(row)}, {n})" for row in commit))
        if n == 0:
            force_round(spark, table)
    shown = _shown(columns)
    # Plain Spark: per key as Spark groups it, the newest commit's change; -U is none, -D removes the key.
    expected = _rows(spark, f"SELECT {shown} FROM (SELECT *, row_number() OVER (PARTITION BY {key} "
                            f"ORDER BY commit_no DESC) AS r FROM {ref} WHERE _change_type IS NULL "
                            f"OR _change_type <> '-U') WHERE r = 1 AND (_change_type IS NULL OR _change_type <> '-D')")
    # The same keys by GROUP BY: one group per key.
    groups = spark.sql(f"SELECT count(*) FROM (SELECT {key} FROM {ref} GROUP BY {key} "
                       f"HAVING max_by(_change_type, commit_no) IS NULL OR max_by(_change_type, commit_no) <> '-D')"
                       ).first()[0]
    assert len(expected) == groups, (expected, groups)
    local = _rows(spark, f"SELECT {shown} FROM {fresh}")
    with local_merge_rows(spark, 0):
        distributed = _rows(spark, f"SELECT {shown} FROM {fresh}")
    assert local == expected, f"merged in the driver {local}, plain Spark {expected}"
    assert distributed == expected, f"merged by Spark {distributed}, plain Spark {expected}"
    # A lookup of one key folds into the local rows; the same answer as the distributed form.
    first_key = key.split(", ")[0]
    probe = f"SELECT {shown} FROM {fresh} WHERE {first_key} = (SELECT min({first_key}) FROM {ref})"
    looked_up = _rows(spark, probe)
    with local_merge_rows(spark, 0):
        assert _rows(spark, probe) == looked_up
    force_round(spark, table)
    assert _rows(spark, f"SELECT {shown} FROM {lake}") == expected
    assert _rows(spark, f"SELECT {shown} FROM {fresh}") == expected


def _sequenced_table(hive_cursor, spark, seq_type: str) -> tuple[str, str, str]:
    name = f"seq_{seq_type.lower()}{next(_counter)}"
    run(hive_cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    run(hive_cursor, f"CREATE TABLE {DB}.{name} (id INT, s {seq_type}, v STRING) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h', 'primary-key'='id', "
                     "'sequence-by'='s', 'bucket.num'='2')")
    return f"{DB}.{name}", f"{DB}_fresh.{name}", f"{DB}_lake.{name}"


def test_a_binary_sequence_by_orders_changes_as_spark_does(hive_cursor, spark):
    """Changes of one key in one INSERT ordered by a BINARY sequence-by: Spark orders bytes unsigned
    (X'FF' after X'02'). The INSERT-time check refused them as unordered (a byte[] is not Comparable)
    and the driver-side merge could not compare them; now both forms and the lake keep X'FF'."""
    table, fresh, lake = _sequenced_table(hive_cursor, spark, "BINARY")
    run(hive_cursor, f"INSERT INTO {table} VALUES (1, X'01', 'first', NULL), (2, X'80', 'two', NULL)")
    force_round(spark, table)
    # Through the gateway: the group commit's INSERT-time checks run.
    run(hive_cursor, f"INSERT INTO {table} VALUES (1, X'FF', 'high', '+U'), (1, X'02', 'low', '+U'), "
                     "(2, X'7F', 'below', '+U')")
    expected = [(1, "FF", "high"), (2, "7F", "below")]  # key 2: a later commit wins whatever its sequence
    query = f"SELECT id, hex(s), v FROM {fresh}"
    assert _rows(spark, query) == expected, "merged in the driver"
    with local_merge_rows(spark, 0):
        assert _rows(spark, query) == expected, "merged by Spark"
    force_round(spark, table)
    assert _rows(spark, f"SELECT id, hex(s), v FROM {lake}") == expected


def test_a_signed_zero_tie_in_a_double_sequence_by_is_refused_as_spark_sees_a_tie(hive_cursor, spark):
    """-0.0 and 0.0 are equal in Spark's ORDER BY: two different changes of one key with them are a tie,
    refused at INSERT like any tie (Java's compareTo put -0.0 first and accepted them, and the round's
    window then picked either)."""
    from pyhive import exc

    table, fresh, _ = _sequenced_table(hive_cursor, spark, "DOUBLE")
    with pytest.raises(exc.OperationalError) as raised:
        hive_cursor.execute(f"INSERT INTO {table} VALUES (1, CAST('-0.0' AS DOUBLE), 'neg', NULL), "
                            "(1, 0.0D, 'pos', NULL)")
    assert raised.value.args[0].status.sqlState == "21000", raised.value
    assert _rows(spark, f"SELECT * FROM {table}") == []
    run(hive_cursor, f"INSERT INTO {table} VALUES (1, CAST('-0.0' AS DOUBLE), 'neg', NULL), "
                     "(1, 1.0D, 'one', NULL)")
    assert _rows(spark, f"SELECT id, v FROM {fresh}") == [(1, "one")]
