"""Rename planning by field id (no Spark): chains are ordered so each new name is free;
a name the lake still uses is a guard error with the statement to run."""

from __future__ import annotations

import pytest

from tierlake.server.catalog import field_ids
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.handle import TableHandle
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


class _Schema:
    def __init__(self, schema_id):
        self._id = schema_id

    def schemaId(self):
        return self._id


class _Table:
    """What the sync cache reads of a loaded Iceberg table."""

    def __init__(self, uuid, schema_id, props=None):
        self._uuid, self.schema_id, self.props = uuid, schema_id, dict(props or {})

    def uuid(self):
        return self._uuid

    def schema(self):
        return _Schema(self.schema_id)

    def properties(self):
        return self.props


def test_a_sync_that_changed_nothing_is_remembered_by_everything_it_reads(monkeypatch):
    from tierlake.server.changelog import lake_schema

    lake_schema.clear_sync_cache()
    answers = iter(range(100))
    calls = []

    def fake_sync(spark, stream, lake, stream_table, lake_table, recorded_text, spec):
        calls.append((stream_table.schema_id, lake_table.schema_id, recorded_text))
        return [lake_schema.Carried("c", "int", next(answers))], changed["value"]

    changed = {"value": False}
    monkeypatch.setattr(lake_schema, "_sync", fake_sync)
    stream, lake = _Table("s-uuid", 1), _Table("l-uuid", 4, {"tierlake.lake.field-ids": '{"1":"c"}'})
    props = {"primary-key": "id"}

    def sync():
        return lake_schema.sync_lake_schema(TableHandle.loaded(None, STREAM, LAKE, stream, lake,
                                                               spec=TieredSpec.from_properties(props)))

    first = sync()
    assert sync() == first and len(calls) == 1  # nothing changed: from memory
    stream.schema_id = 2  # a stream schema change
    assert sync() != first and len(calls) == 2
    lake.props["tierlake.lake.field-ids"] = '{"1":"d"}'  # the recorded ids changed (by hand)
    sync()
    assert len(calls) == 3
    props["sequence-by"] = "v"  # a key or sequence-by column is part of what it checks
    sync()
    assert len(calls) == 4
    lake.schema_id, lake._uuid = 5, "other-uuid"  # another lake table under the name
    sync()
    assert len(calls) == 5
    assert sync() and len(calls) == 5

    changed["value"] = True  # a sync that committed something is not remembered: the next one checks again
    stream.schema_id = 3
    sync()
    sync()
    assert len(calls) == 7
    lake_schema.clear_sync_cache()
