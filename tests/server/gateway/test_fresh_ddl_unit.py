"""Which statements the gateway takes to keep fresh views with their tables
(server/gateway/fresh_ddl.py): qualified DROP TABLE and RENAME only."""

from __future__ import annotations

import pytest

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.gateway.fresh_ddl import TableChange, parse_table_change


@pytest.mark.parametrize("statement,expected", [
    ("DROP TABLE shop.orders", TableChange(TablePath("shop", "orders"), None)),
    ("drop table if exists spark_catalog.Shop.Orders purge", TableChange(TablePath("shop", "orders"), None)),
    ("ALTER TABLE shop.orders RENAME TO shop.orders2",
     TableChange(TablePath("shop", "orders"), TablePath("shop", "orders2"))),
])
def test_qualified_drop_and_rename_are_taken(statement, expected):
    assert parse_table_change(statement) == expected


@pytest.mark.parametrize("statement", [
    "DROP TABLE orders",                      # may be a session's temporary view: relayed
    "ALTER TABLE orders RENAME TO orders2",
    "DROP VIEW shop_fresh.orders",
    "ALTER TABLE shop.orders ADD COLUMNS (x INT)",
    "SELECT 'drop table rename'",
    "DROP TABLE shop.orders; DROP TABLE x.y",
])
def test_anything_else_goes_to_spark(statement):
    assert parse_table_change(statement) is None
