"""Keys compared as Spark compares them on the ingest path (issue 50, reproduction 4; docs/tiering.md,
"Key types"): the group commit never puts two changes of one key in one snapshot and the INSERT-time
ambiguity check finds them, for BINARY keys (by content, not by the identity of a ``byte[]``),
``-0.0``/``0.0`` and NaN in a composite key. The rule the round enforces (tiering_pk_winners.sql.j2)
is Spark's own equality, so a slip here shows as a table that goes ``Failed``."""

from __future__ import annotations

import threading

import pytest

from tests.server.ingest.test_ingest import connect, error_of, snapshots
from tests.server.tiering.conftest import coordinator_state, run, wait_tiered

pytestmark = pytest.mark.integration

WRITERS, STATEMENTS = 8, 15
# Rounds every 2 s; no stream compaction, which would merge commits: each stream file keeps its commit's
# sequence number, which the checks below group and order changes by.
KEEP_COMMITS = "'table.datalake.freshness'='2 s', 'table.datalake.auto-compaction'='false'"


def _changes_per_commit(spark, table: str, key: str) -> list[tuple]:
    """(commit, key, changes) of every commit holding more than one change of a key, keys grouped by Spark."""
    return [tuple(r) for r in spark.sql(
        f"SELECT e.sequence_number, {key}, count(*) AS n FROM {table} d "
        f"JOIN (SELECT data_file.file_path AS path, sequence_number FROM {table}.entries) e ON d._file = e.path "
        f"GROUP BY e.sequence_number, {key} HAVING count(*) > 1").collect()]


def _last_change(spark, table: str, key: str) -> list[tuple]:
    """Per key, the value of its change in the newest commit (plain Spark over the stream)."""
    return sorted(tuple(r) for r in spark.sql(
        f"SELECT {key}, n FROM (SELECT d.*, row_number() OVER (PARTITION BY {key} ORDER BY e.sequence_number DESC) "
        f"AS r FROM {table} d JOIN (SELECT data_file.file_path AS path, sequence_number FROM {table}.entries) e "
        f"ON d._file = e.path) WHERE r = 1").collect())


def _write(server, statements: list[str], errors: list) -> None:
    try:
        with connect(server) as conn:
            cursor = conn.cursor()
            for statement in statements:
                cursor.execute(statement)
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(repr(e))


def _concurrently(server, per_writer: list[list[str]]) -> None:
    errors: list = []
    threads = [threading.Thread(target=_write, args=(server, s, errors)) for s in per_writer]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert errors == []


def test_concurrent_writers_of_one_binary_key_are_tiered_exactly(server, spark, hive_cursor, db, workers):
    """Reproduction 4: 8 writers x 15 ``VALUES (X'AA', n, '+U')``. Every commit holds at most one change of the
    key (grouped by Spark: by content), the table tiers without going Failed, and the lake holds the key once
    with the value of its newest change."""
    table = f"{db}.bin"
    run(hive_cursor, f"CREATE TABLE {table} (k BINARY, n BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     f"'primary-key'='k', 'bucket.num'='2', {KEEP_COMMITS})")
    _concurrently(server, [[f"INSERT INTO {table} (k, n, _change_type) VALUES (X'AA', {w * 1000 + i}, '+U')"
                            for i in range(STATEMENTS)] for w in range(WRITERS)])
    assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == WRITERS * STATEMENTS
    assert _changes_per_commit(spark, table, "k") == []
    wait_tiered(server, table)
    assert coordinator_state(server, table).status.value != "Failed"
    lake = sorted(tuple(r) for r in spark.sql(f"SELECT k, n FROM {db}_lake.bin").collect())
    assert lake == _last_change(spark, table, "k") and len(lake) == 1, lake


def test_concurrent_writers_of_signed_zero_and_nan_keys_are_tiered_exactly(server, spark, hive_cursor, db, workers):
    """A composite key ``(id, f DOUBLE)``: writers alternate ``-0.0`` and ``0.0`` (one key for Spark) and NaN;
    no commit holds two changes of one key as Spark groups it, and the lake holds each key once."""
    table = f"{db}.dbl"
    run(hive_cursor, f"CREATE TABLE {table} (id INT, f DOUBLE, n BIGINT) TBLPROPERTIES ("
                     "'table.datalake.enabled'='true', 'primary-key'='id, f', 'bucket.num'='2', "
                     f"{KEEP_COMMITS})")
    floats = ["CAST('-0.0' AS DOUBLE)", "0.0D", "CAST('NaN' AS DOUBLE)"]
    _concurrently(server, [[f"INSERT INTO {table} (id, f, n, _change_type) VALUES (1, {floats[(w + i) % 3]}, "
                            f"{w * 1000 + i}, '+U')" for i in range(10)] for w in range(6)])
    assert _changes_per_commit(spark, table, "id, f") == []
    wait_tiered(server, table)
    lake = sorted((r.id, str(r.f).replace("-0.0", "0.0"), r.n) for r in spark.sql(
        f"SELECT id, f, n FROM {db}_lake.dbl").collect())
    expected = sorted((r[0], str(r[1]).replace("-0.0", "0.0"), r[2])
                      for r in _last_change(spark, table, "id, f"))
    assert lake == expected and len(lake) == 2, (lake, expected)


def test_the_insert_check_finds_different_changes_of_one_key_as_spark_compares_keys(server, spark, hive_cursor,
                                                                                    db):
    """Different changes of one key in one statement are refused (tiering could not order them), the key
    compared as Spark compares it; equal changes are no conflict, equal by content too."""
    table = f"{db}.bk"
    run(hive_cursor, f"CREATE TABLE {table} (k BINARY, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'primary-key'='k')")
    run(hive_cursor, f"INSERT INTO {table} (k, v, _change_type) VALUES (X'01', 'a', '+I')")
    before = snapshots(spark, table)
    text = error_of(hive_cursor, f"INSERT INTO {table} (k, v, _change_type) "
                                 "VALUES (X'AA', 'a', '+U'), (X'AA', 'b', '+U'), (X'BB', 'c', '+U')")
    assert text.startswith("21000 ") and "1 key(s) with different changes in one statement" in text \
        and "key (k=X'AA')" in text, text
    assert snapshots(spark, table) == before
    # The same change twice (two byte arrays of the same content): no conflict.
    run(hive_cursor, f"INSERT INTO {table} (k, v, _change_type) VALUES (X'CC', 'a', '+U'), (X'CC', 'a', '+U')")

    dbl = f"{db}.fk"
    run(hive_cursor, f"CREATE TABLE {dbl} (id INT, f DOUBLE, v STRING) TBLPROPERTIES ("
                     "'table.datalake.enabled'='true', 'primary-key'='id, f')")
    for first, second in [("CAST('-0.0' AS DOUBLE)", "0.0D"), ("CAST('NaN' AS DOUBLE)", "CAST('NaN' AS DOUBLE)")]:
        text = error_of(hive_cursor, f"INSERT INTO {dbl} (id, f, v, _change_type) "
                                     f"VALUES (1, {first}, 'a', '+U'), (1, {second}, 'b', '+U')")
        assert text.startswith("21000 ") and "1 key(s) with different changes in one statement" in text, text
    # -0.0 and 0.0 in a value column are one value for Spark: the same change twice.
    run(hive_cursor, f"INSERT INTO {dbl} (id, f, v, _change_type) VALUES (2, 1.0D, 'a', '+U'), (2, 1.0D, 'a', '+U')")
    dec = f"{db}.dk"
    run(hive_cursor, f"CREATE TABLE {dec} (d DECIMAL(10, 2), s STRING, v STRING) TBLPROPERTIES ("
                     "'table.datalake.enabled'='true', 'primary-key'='d, s')")
    text = error_of(hive_cursor, f"INSERT INTO {dec} (d, s, v, _change_type) "
                                 "VALUES (1.5, 'x', 'a', '+U'), (1.50, 'x', 'b', '+U'), (1.5, 'y', 'c', '+U')")
    assert text.startswith("21000 ") and "1 key(s) with different changes" in text and "d=1.5" in text, text


@pytest.mark.parametrize("columns, key, column, refused", [
    ("f DOUBLE, v STRING", "f", "f", "cannot be the first key column"),
    ("b BOOLEAN, id INT", "b, id", "b", "cannot be the first key column"),
    ("id INT, a ARRAY<INT>", "id, a", "a", "cannot be a key"),
    ("id INT, s STRUCT<x: INT>", "id, s", "s", "cannot be a key"),
    ("id INT, m MAP<STRING, INT>", "id, m", "m", "cannot be a key"),
])
def test_a_key_type_that_cannot_be_compared_or_bucketed_is_refused_at_create(server, spark, hive_cursor, db, columns,
                                                                            key, column, refused):
    """Refused before anything is made (UnsupportedKeyTypeError, 42P16), naming the column and the fix."""
    text = error_of(hive_cursor, f"CREATE TABLE {db}.t ({columns}) TBLPROPERTIES ('table.datalake.enabled'='true', "
                                 f"'primary-key'='{key}')")
    assert text.startswith("42P16 ") and f"primary key column '{column}' has type" in text and refused in text, text
    assert not spark.catalog.tableExists(f"{db}.t") and not spark.catalog.tableExists(f"{db}_lake.t")


def test_supported_key_types_pass_the_spec_check():
    from tierlake.server.catalog.spec import Column, TieredSpec

    columns = [Column(n, t) for n, t in [("i", "TINYINT"), ("s", "smallint"), ("n", "INT"), ("l", "BIGINT"),
                                         ("d", "DECIMAL(38, 10)"), ("t", "STRING"), ("c", "CHAR(3)"),
                                         ("vc", "varchar(4)"), ("b", "BINARY"), ("dt", "DATE"), ("ts", "TIMESTAMP"),
                                         ("tn", "timestamp_ntz"), ("bo", "BOOLEAN"), ("f", "FLOAT"), ("x", "DOUBLE")]]
    for first in ("i", "s", "n", "l", "d", "t", "c", "vc", "b", "dt", "ts", "tn"):
        others = [c.name for c in columns if c.name != first]
        TieredSpec.from_properties({"primary-key": ", ".join([first, *others])}, columns)
