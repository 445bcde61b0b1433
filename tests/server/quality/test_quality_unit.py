"""Data quality without a JVM: the table property, kwargs parsing, expectation
names and arguments (real GX classes), the failure text of a blocked round."""

from __future__ import annotations

import sys
from decimal import Decimal

import pytest

from tierlake.server.catalog.spec import TieredSpec, quality_mode
from tierlake.server.exceptions import InvalidArgumentError, MissingDependencyError
from tierlake.server.quality import gx
from tierlake.server.quality.suite import RunResult, failure_text
from tierlake.server.sqlapi.types import JsonObject, SqlMap, coerce, sql_type


def test_quality_mode_is_off_warn_or_block():
    assert quality_mode(None) == "off"
    assert quality_mode(" Block ") == "block"
    assert TieredSpec.from_properties({"table.datalake.quality": "warn"}).quality == "warn"
    with pytest.raises(InvalidArgumentError) as info:
        TieredSpec.from_properties({"table.datalake.quality": "strict"})
    assert info.value.message == "'table.datalake.quality' must be one of off, warn, block; got 'strict'"


def test_kwargs_are_a_json_string_or_a_map():
    assert sql_type(JsonObject | None) == "JSON"
    assert coerce('{"column": "a", "value_set": [1, 2]}', JsonObject, "p") == {"column": "a", "value_set": [1, 2]}
    as_map = coerce(SqlMap(column="a", min_value=Decimal("0.5"), max_value=Decimal("10"), value_set=[Decimal("1")]),
                    JsonObject | None, "p")
    assert as_map == {"column": "a", "min_value": 0.5, "max_value": 10, "value_set": [1]}
    assert isinstance(as_map["max_value"], int)
    for value, fragment in [("[1]", "expected a JSON object, got list"), ("{x", "not valid JSON"),
                            (5, "expected a JSON object (a STRING or map(...)), got BIGINT 5")]:
        with pytest.raises(InvalidArgumentError) as info:
            coerce(value, JsonObject, "parameter 'kwargs'")
        assert fragment in info.value.message and info.value.message.startswith("parameter 'kwargs'")


def test_expectation_names_and_arguments_are_checked_by_gx():
    assert gx.build("ExpectColumnValuesToBeUnique", {"column": "id"}).column == "id"
    assert gx.snake_name("ExpectTableRowCountToEqual") == "expect_table_row_count_to_equal"
    with pytest.raises(InvalidArgumentError) as info:
        gx.build("expect_column_values_to_be_uniqe", {"column": "id"})
    assert "unknown expectation 'expect_column_values_to_be_uniqe'; did you mean expect_column_values_to_be_unique" \
        in info.value.message
    with pytest.raises(InvalidArgumentError) as info:
        gx.build("expect_column_values_to_be_between", {"column": "id", "min_value": "x", "max_valu": 3})
    assert info.value.message.startswith("bad arguments for expect_column_values_to_be_between")
    assert "min_value: value is not a valid float" in info.value.message
    assert "max_valu: extra fields not permitted" in info.value.message
    with pytest.raises(InvalidArgumentError) as info:
        gx.build("expect_column_values_to_be_unique", {"column": "id", "result_format": "COMPLETE"})
    assert "result_format are set by tierlake" in info.value.message


def test_gx_is_imported_with_analytics_off_and_missing_gx_says_what_to_install(monkeypatch):
    import os

    gx.load()
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false"
    monkeypatch.setattr(gx, "_state", {})
    monkeypatch.setitem(sys.modules, "great_expectations", None)
    with pytest.raises(MissingDependencyError) as info:
        gx.build("expect_column_values_to_be_unique", {"column": "id"})
    assert "pip install 'great-expectations>=1.0,<2'" in info.value.message


def test_a_blocked_round_names_the_failing_expectations_and_their_keys():
    outcomes = [gx.Outcome('expect_column_values_to_be_unique(column="id")', False, None, 2, '[{"id": 7}]'),
                gx.Outcome("expect_table_row_count_to_equal(value=3)", False, "4"),
                gx.Outcome('expect_column_values_to_not_be_null(column="id")', True, None, 0)]
    text = failure_text(RunResult("r1", outcomes))
    assert text == ('expect_column_values_to_be_unique(column="id"): 2 unexpected, e.g. [{"id": 7}]; '
                    "expect_table_row_count_to_equal(value=3): observed 4")
