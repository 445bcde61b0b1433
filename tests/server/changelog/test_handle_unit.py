"""The handle's factories and the one loader, without a JVM: the loads they make, counted."""

from __future__ import annotations

import dataclasses

import pytest

from tierlake.server.catalog import properties as P
from tierlake.server.catalog import table_path
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.changelog import handle as handle_module
from tierlake.server.changelog.handle import UNASSIGNED, Assignment, TableHandle

STREAM, LAKE = TablePath("db", "t"), TablePath("db_lake", "t")


class FakeTable:
    def __init__(self, name, properties=None):
        self.name, self.props, self.refreshes = name, dict(properties or {}), 0

    def properties(self):
        return self.props

    def refresh(self):
        self.refreshes += 1


@pytest.fixture
def loads(monkeypatch):
    """Every table the handle module loads, as ``(path, locking)``; the stream's properties name its lake."""
    seen = []

    def load(spark, path, locking=False):
        seen.append((path, locking))
        return FakeTable(path, {P.LAKE_TABLE_PROPERTY: "elsewhere.t_lake"} if path == STREAM else {})

    monkeypatch.setattr(handle_module, "load_table", load)
    return seen


def test_the_loader_takes_a_path_and_quotes_it(monkeypatch):
    calls = []
    monkeypatch.setattr(table_path, "iceberg_table", lambda spark, name, **kw: calls.append((spark, name, kw)))
    load_table("spark", TablePath("my db", "t`x"))
    load_table("spark", STREAM, locking=True)
    assert calls == [("spark", "`my db`.`t``x`", {}), ("spark", "`db`.`t`", {"locking": True})]


def test_open_loads_the_stream_once_and_takes_the_lake_it_was_registered_with(loads):
    handle = TableHandle.open("spark", None, "db.t", Assignment(7, 3, "job-1"))
    assert (handle.stream, handle.lake, handle.path) == (STREAM, TablePath("elsewhere", "t_lake"), "db.t")
    assert handle.assignment == Assignment(7, 3, "job-1")
    assert loads == [(STREAM, False)]  # the lake on first use, once
    assert handle.lake_table is handle.lake_table and handle.stream_table is handle.stream_table
    assert handle.properties == {P.LAKE_TABLE_PROPERTY: "elsewhere.t_lake"}
    assert loads == [(STREAM, False), (TablePath("elsewhere", "t_lake"), False)]


def test_of_a_stream_without_a_lake_property_takes_the_default_lake(monkeypatch):
    monkeypatch.setattr(handle_module, "load_table", lambda spark, path, locking=False: FakeTable(path))
    handle = TableHandle.of("spark", None, STREAM)
    assert handle.lake == LAKE and handle.assignment is UNASSIGNED and handle.path == "db.t"


def test_a_staged_ctas_has_its_spec_a_job_and_one_unbounded_commit(loads):
    spec = TieredSpec(["id"])
    handle = TableHandle.staged("spark", None, STREAM, LAKE, spec, "ctas-9")
    assert handle.assignment == Assignment(0, 0, "ctas-9") and handle.spec is spec
    assert handle.setting(P.MAX_ROUND) is None and handle.setting(P.CHUNK_ROWS) == 1 << 62
    assert loads == []


def test_loaded_tables_are_not_loaded_again(loads):
    stream_table, lake_table = FakeTable("s", {"primary-key": "id"}), FakeTable("l")
    handle = TableHandle.loaded("spark", STREAM, LAKE, stream_table, lake_table)
    assert handle.stream_table is stream_table and handle.lake_table is lake_table
    assert handle.spec.primary_key == ["id"] and handle.fresh_lake() is lake_table and lake_table.refreshes == 1
    assert loads == []


def test_in_session_and_with_settings_copy_the_handle_not_its_tables(loads):
    handle = TableHandle.loaded("round", STREAM, LAKE, FakeTable("s"), FakeTable("l"))
    handle.assignment = Assignment(1, 2, "j")
    locking = handle.locking_stream
    other = handle.in_session("process")
    assert (other.spark, handle.spark) == ("process", "round")
    assert other.stream_table is handle.stream_table and other.lake_table is handle.lake_table
    assert other.locking_stream is locking and other.assignment == handle.assignment
    assert loads == [(STREAM, True)]
    tuned = handle.with_settings({P.CHUNK_ROWS: 5})
    assert tuned.setting(P.CHUNK_ROWS) == 5 and handle.overrides == {} and tuned.stream_table is handle.stream_table


def test_an_assignment_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Assignment(1, 2, "j").epoch = 3  # type: ignore[misc]
