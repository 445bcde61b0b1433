"""Tiered DDL's steps (server/tiering/ddl.py, ``Steps``) and the reserved column names
(server/catalog/spec.py), without Spark."""

from __future__ import annotations

import pytest

from tierlake.server.catalog.spec import ICEBERG_METADATA_COLUMNS, Column, TieredSpec, refuse_reserved_names
from tierlake.server.exceptions import InvalidArgumentError, ReservedNameError, TableExistsError, TieredDdlError
from tierlake.server.tiering.ddl import Steps


def test_a_failing_step_undoes_the_earlier_ones_newest_first_and_is_named():
    done = []
    steps = Steps("CREATE TABLE db.t")
    steps.run("one", lambda: done.append("one"), undo=("one undone", lambda: done.append("undo one")))
    steps.run("two", lambda: done.append("two"), undo=("two undone", lambda: done.append("undo two")))
    with pytest.raises(TieredDdlError) as raised:
        steps.run("three", lambda: 1 / 0, undo=("three undone", lambda: done.append("undo three")))
    assert done == ["one", "two", "undo two", "undo one"]  # three made nothing to undo (not partial)
    assert raised.value.message == ("CREATE TABLE db.t failed at step 'three': division by zero; "
                                    "undone: two undone, one undone")
    assert isinstance(raised.value.__cause__, ZeroDivisionError)


def test_a_partial_step_is_undone_too_unless_its_object_already_existed():
    done = []
    steps = Steps("CREATE TABLE db.t")
    with pytest.raises(TieredDdlError, match="undone: t dropped"):
        steps.run("make t", lambda: 1 / 0, undo=("t dropped", lambda: done.append("drop")), partial=True)
    assert done == ["drop"]

    def exists():
        raise TableExistsError("table db.t already exists")

    steps = Steps("CREATE TABLE db.t")
    with pytest.raises(TieredDdlError) as raised:
        steps.run("make t", exists, undo=("t dropped", lambda: done.append("again")), partial=True)
    assert done == ["drop"] and raised.value.sqlstate == "42P07"
    assert raised.value.message.endswith("table db.t already exists; nothing was made")


def test_an_undo_that_fails_is_named_and_the_others_still_run():
    done = []

    def broken():
        raise RuntimeError("metastore down")

    steps = Steps("CREATE TABLE db.t")
    steps.run("one", lambda: None, undo=("one undone", lambda: done.append("undo one")))
    steps.run("two", lambda: None, undo=("two undone", broken))
    with pytest.raises(TieredDdlError) as raised:
        steps.run("three", lambda: (_ for _ in ()).throw(InvalidArgumentError("bad")))
    assert done == ["undo one"]
    assert raised.value.sqlstate == "22023"
    assert raised.value.message == ("CREATE TABLE db.t failed at step 'three': bad; undone: one undone; "
                                    "COULD NOT undo: two undone (metastore down) (remove by hand)")


@pytest.mark.parametrize("name", ["__tierlake", "__tierlake_rank", "__TIERLAKE_d", *ICEBERG_METADATA_COLUMNS,
                                  "_FILE"])
def test_reserved_names_are_refused(name):
    with pytest.raises(ReservedNameError) as raised:
        refuse_reserved_names([Column("id", "BIGINT"), Column(name, "INT")])
    assert repr(name) in raised.value.message and raised.value.sqlstate == "42939"
    with pytest.raises(ReservedNameError):
        TieredSpec.from_properties({"primary-key": "id"}, [Column("id", "BIGINT"), Column(name, "INT")])


@pytest.mark.parametrize("name", ["d", "l", "w", "p", "f", "ranked", "winners", "sequence_number", "file_path",
                                  "_tierlake", "tierlake", "x__tierlake", "_change_ordinal", "a`b", "sp ace",
                                  "do.t", "ünï", "select"])
def test_other_names_pass(name):
    refuse_reserved_names([Column(name, "INT")])


@pytest.mark.parametrize("type_text, odd", [
    ("BIGINT NOT NULL COMMENT 'x'", []),
    ("STRUCT<d: INT, `_file`: STRING, `select`: ARRAY<STRUCT<`int`: INT, Mixed_1: INT>>>", []),
    ("STRUCT<`a b`: INT, `c:d`: ARRAY<STRUCT<`x,y`: INT>>, m: MAP<STRING, STRUCT<`ün`: INT>>> NOT NULL",
     ["a b", "c:d", "x,y", "ün"]),
])
def test_struct_field_names_the_metastore_cannot_hold(type_text, odd):
    from tierlake.server.catalog.spec import odd_field_name, refuse_odd_field_names, struct_field_names

    assert [n for n in struct_field_names(type_text) if odd_field_name(n)] == odd
    if odd:
        with pytest.raises(InvalidArgumentError, match="cannot be stored in the metastore"):
            refuse_odd_field_names([Column("s", type_text)])
    else:
        refuse_odd_field_names([Column("s", type_text)])
