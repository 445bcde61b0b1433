"""SmallTable's JVM path (server/state/java/SmallTables.java) against the
Spark path it replaces: the same rows come back whichever wrote them, a lost
race is a conflict the retry loop recognises, and Spark reads what it wrote."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from tierlake.server.state import state_table
from tierlake.server.state.state_table import SmallTable, is_conflict

pytestmark = pytest.mark.integration

COLUMNS = ("id BIGINT, name STRING, n INT, ok BOOLEAN, ratio DOUBLE, at TIMESTAMP, "
           "props MAP<STRING, STRING>")
T = datetime(2026, 11, 25, 9, 30, 15, 123456, tzinfo=timezone.utc)
ROWS = [
    {"id": 1, "name": "a", "n": 7, "ok": True, "ratio": 0.25, "at": T, "props": {"k": "v", "e": ""}},
    {"id": 2, "name": None, "n": None, "ok": False, "ratio": None, "at": None, "props": None},
    {"id": 3, "name": "ü'\"\\", "n": -1, "ok": None, "ratio": 1e300, "at": T - timedelta(days=20000),
     "props": {}},
]


@pytest.fixture
def table(spark):
    name = f"default.small_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} ({COLUMNS}) USING iceberg TBLPROPERTIES ('format-version' = '2')")
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


class SparkOnly(SmallTable):
    def _io(self, table):
        return None


def by_id(rows):
    return sorted(rows, key=lambda r: r["id"])


def test_the_jvm_path_is_used_and_reads_what_either_path_wrote(spark, table):
    jvm, through_spark = SmallTable(spark, table), SparkOnly(spark, table)
    jvm.append(ROWS[:2])
    assert jvm._jvm_io is True, "the SmallTables class should be on the driver's class path"
    through_spark.append(ROWS[2:])
    for reader in (SmallTable(spark, table), SparkOnly(spark, table)):
        _, rows = reader.load()
        assert by_id(rows) == ROWS
    assert spark.sql(f"SELECT count(*), max(at) FROM {table}").first()[0] == 3


def test_replace_is_validated_from_its_base(spark, table):
    a, b = SmallTable(spark, table), SmallTable(spark, table)
    a.append(ROWS)
    base, _ = a.load()
    a.replace([ROWS[0]], base)
    assert [r["id"] for r in b.load()[1]] == [1]
    with pytest.raises(Exception) as lost:
        b.replace([ROWS[1]], base)  # computed from the snapshot before a's commit
    assert is_conflict(lost.value)
    assert by_id(SparkOnly(spark, table).load()[1]) == [ROWS[0]]
    # The retry loop recomputes from fresh rows and commits.
    assert b.update(lambda rows: (rows.append(dict(ROWS[1])) or len(rows), True)) == 2
    assert by_id(a.load()[1]) == ROWS[:2]


def test_a_commit_files_the_rows_a_read_of_its_snapshot_returns(spark, table):
    """A replace through the JVM files its rows under the snapshot it made: the next
    load (the coordinator's next heartbeat) reads no data file, and what it is served
    is what a read of that snapshot returns."""
    writer = SmallTable(spark, table)
    writer.append(ROWS)
    base, _ = writer.load()
    writer.replace(ROWS[::-1], base)
    filed = state_table._ROWS[table][0]
    snap, served = SmallTable(spark, table).load()
    assert filed == snap != base, "the commit should file its rows under the snapshot it made"
    assert served == ROWS[::-1]
    state_table._ROWS.clear()
    assert SmallTable(spark, table).load() == (snap, served)  # read from the data file this time


def test_a_commit_made_elsewhere_is_read_not_served_from_memory(spark, table):
    mine = SmallTable(spark, table)
    mine.append(ROWS[:1])
    base, _ = mine.load()
    mine.replace(ROWS[:2], base)
    spark.sql(f"DELETE FROM {table} WHERE id = 1")  # Spark's own commit: a snapshot nobody filed
    assert [r["id"] for r in mine.load()[1]] == [2]
    served = mine.load()[1]
    served[0]["props"] = {"changed": "by the caller"}  # callers get copies
    assert mine.load()[1][0]["props"] is None


def test_an_append_retried_with_its_token_lands_once(spark, table):
    """The round history's retry after an unknown commit outcome (coordinator/history.py)."""
    small = SmallTable(spark, table)
    assert small.append(ROWS[:2], token="batch-1") is True
    assert small.append(ROWS[:2], token="batch-1") is False  # it landed: nothing appended again
    assert small.append(ROWS[2:], token="batch-2") is True
    assert by_id(small.load()[1]) == ROWS


def test_properties_are_set_in_the_commit_of_the_rows(spark, table):
    small = SmallTable(spark, table)
    small.append(ROWS)
    base, _ = small.load()
    small.replace([ROWS[0]], base, {"tierlake.next-table-id": "42"})
    assert small.properties()["tierlake.next-table-id"] == "42"
    # A replace that loses the race sets neither the rows nor the properties.
    with pytest.raises(Exception) as lost:
        small.replace([ROWS[1]], base, {"tierlake.next-table-id": "43"})
    assert is_conflict(lost.value)
    assert small.properties()["tierlake.next-table-id"] == "42"
    assert by_id(small.load()[1]) == [ROWS[0]]
