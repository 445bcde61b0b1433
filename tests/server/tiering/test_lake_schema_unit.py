"""Rename planning by field id (no Spark): chains are ordered so each new name is free;
a name the lake still uses is a guard error with the statement to run."""

from __future__ import annotations

import pytest

from tierlake.server.catalog import field_ids
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.lake_schema import _plan_renames
from tierlake.server.exceptions import TieringGuardError

STREAM, LAKE = TablePath("db", "t"), TablePath("db_lake", "t")


def test_a_chain_of_renames_is_ordered_so_each_name_is_free():
    mapping = {1: "a", 2: "b", 3: "c"}
    # b -> a only after a -> z
    renames = _plan_renames(STREAM, LAKE, {1: "z", 2: "a", 3: "c"}, mapping, {"a", "b", "c"})
    assert renames == [("a", "z"), ("b", "a")]
    assert mapping == {1: "z", 2: "a", 3: "c"}


def test_a_case_change_is_a_rename():
    mapping = {1: "a"}
    assert _plan_renames(STREAM, LAKE, {1: "A"}, mapping, {"a"}) == [("a", "A")]


@pytest.mark.parametrize("fields, mapping, lake", [
    ({2: "a"}, {1: "a", 2: "b"}, {"a", "b"}),  # a dropped, b renamed to a: the lake keeps a
    ({1: "b", 2: "a"}, {1: "a", 2: "b"}, {"a", "b"}),  # a swap
])
def test_a_rename_onto_a_name_the_lake_keeps_names_the_fix(fields, mapping, lake):
    with pytest.raises(TieringGuardError) as e:
        _plan_renames(STREAM, LAKE, fields, mapping, lake)
    assert "ALTER TABLE db_lake.t RENAME COLUMN a TO a_old" in str(e.value) or \
        "ALTER TABLE db_lake.t RENAME COLUMN b TO b_old" in str(e.value)
    assert "CALL sys.retry_tiering('db.t')" in str(e.value)


def test_the_recorded_mapping_round_trips():
    class Table:
        def __init__(self, props):
            self._props = props

        def properties(self):
            return self._props

    assert field_ids.read(Table({})) is None
    text = field_ids.encode({12: "b", 3: "a"})
    assert text == '{"3":"a","12":"b"}'
    assert field_ids.read(Table({"tierlake.lake.field-ids": text})) == {3: "a", 12: "b"}
