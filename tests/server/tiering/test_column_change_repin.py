"""A column change of a stream table re-pins its fresh view before the ALTER is answered (issue 54:
right after ``ALTER … DROP/RENAME COLUMN`` the view failed with an internal error until a round
re-pinned it). No tiering worker runs here, so no round can re-pin it instead; what the view shows
right after the ALTER is what it shows after the next round."""

from __future__ import annotations

import uuid

import pytest

from tests.server.tiering.test_fresh_views import force_round

pytestmark = pytest.mark.integration


def read(cursor, fresh: str) -> tuple[list[str], list[tuple]]:
    cursor.execute(f"SELECT * FROM {fresh} ORDER BY id")
    return [d[0].split(".")[-1] for d in cursor.description], cursor.fetchall()


@pytest.mark.parametrize("pk", [True, False])
def test_the_fresh_view_reads_right_after_a_column_change(hive_cursor, spark, pk):
    db = "colchange_" + uuid.uuid4().hex[:6]
    props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h'"
    if pk:
        props += ", 'primary-key'='id'"
    change = ", '+I'" if pk else ""
    hive_cursor.execute(f"CREATE DATABASE {db}")
    hive_cursor.execute(f"CREATE TABLE {db}.t (id BIGINT, amount DOUBLE, note STRING) TBLPROPERTIES ({props})")
    hive_cursor.execute(f"INSERT INTO {db}.t VALUES (1, 1.5, 'a'{change}), (2, 2.5, 'b'{change})")
    force_round(spark, f"{db}.t")  # row 1 and 2 in the lake, with their note
    hive_cursor.execute(f"INSERT INTO {db}.t VALUES (3, 3.5, 'c'{change})")  # pending in the stream
    fresh = f"{db}_fresh.t"
    assert read(hive_cursor, fresh) == (["id", "amount", "note"], [(1, 1.5, "a"), (2, 2.5, "b"), (3, 3.5, "c")])

    steps = [
        f"ALTER TABLE {db}.t DROP COLUMN note",
        f"ALTER TABLE {db}.t RENAME COLUMN amount TO total",
        f"ALTER TABLE {db}.t ADD COLUMNS (tag STRING)",
    ]
    expected = [
        # A dropped stream column stays in the lake with its values (docs/tiering.md, "Schema changes").
        (["id", "amount", "note"], [(1, 1.5, "a"), (2, 2.5, "b"), (3, 3.5, None)]),
        (["id", "total", "note"], [(1, 1.5, "a"), (2, 2.5, "b"), (3, 3.5, None)]),
        (["id", "total", "note", "tag"], [(1, 1.5, "a", None), (2, 2.5, "b", None), (3, 3.5, None, None)]),
    ]
    for statement, want in zip(steps, expected, strict=True):
        hive_cursor.execute(statement)
        assert read(hive_cursor, fresh) == want, statement
        force_round(spark, f"{db}.t")
        assert read(hive_cursor, fresh) == want, f"after the round that followed {statement}"
