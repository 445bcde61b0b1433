"""The changelog check's error text (server/changelog/validation.py), without Spark."""

from __future__ import annotations

from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.changelog.validation import FIX_ORDER, describe
from tierlake.server.exceptions import ChangelogError, TieringGuardError

SPEC = TieredSpec(primary_key=["order_id"], sequence_by="ts")


def test_ambiguous_keys_name_the_table_key_commit_and_fix():
    problems = [{"problem": "ambiguous", "detail": '{"order_id":7}', "position": 5, "rows": 2, "total": 8},
                {"problem": "ambiguous", "detail": '{"order_id":"x\'y"}', "position": 5, "rows": 3, "total": 8}]
    text = describe("shop.orders", SPEC, problems, 5, (111, 110))
    assert text.startswith("the changelog of primary-key table shop.orders cannot be tiered")
    assert "key (order_id=7) (2 changes in the commit at log position 5)" in text
    assert "key (order_id='x''y')" in text and "and 6 more keys" in text
    assert "sequence-by column ts is NULL or equal" in text and FIX_ORDER in text
    assert "Nothing of the commit at log position 5 (snapshot 111) was tiered" in text
    assert "rollback_to_snapshot('shop.orders', 110)" in text and "sys.retry_tiering('shop.orders')" in text
    assert len(text) < 2048  # sys.lake_tiering_status.last_error keeps 2048 characters


def test_unknown_change_types_and_null_keys_are_counted():
    problems = [{"problem": "change_type", "detail": "+X", "position": 4, "rows": 2, "total": None},
                {"problem": "change_type", "detail": "-D ", "position": 6, "rows": 1, "total": None},
                {"problem": "null_key", "detail": '{"order_id":null,"amount":1.0}', "position": 4, "rows": 3,
                 "total": None}]
    text = describe("shop.orders", TieredSpec(primary_key=["order_id"]), problems, 4, (9, None))
    assert "unknown _change_type values '+X' (2 rows, first at log position 4), '-D ' (1 row" in text
    assert "3 rows with a NULL key column (order_id)" in text and '{"order_id":null,"amount":1.0}' in text
    assert "first commit, which cannot be rolled back" in text


def test_the_error_is_a_tiering_guard_error_with_its_own_sqlstate():
    assert issubclass(ChangelogError, TieringGuardError)
    assert ChangelogError.sqlstate == "22000" and ChangelogError.error_code == 5002
