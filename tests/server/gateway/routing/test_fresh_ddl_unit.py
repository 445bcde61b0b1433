"""Which statements the gateway takes to keep fresh views with their tables
(server/gateway/routing/fresh_ddl.py): qualified DROP TABLE and RENAME only, as
Spark's parse names them (the plan's root class and name parts)."""

from __future__ import annotations

import pytest

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.gateway.routing.fresh_ddl import TableChange, may_change_table, table_change


@pytest.mark.parametrize("root,name,new_name,expected", [
    ("DropTable", ["shop", "orders"], None, TableChange(TablePath("shop", "orders"), None)),
    ("DropTable", ["spark_catalog", "Shop", "Orders"], None, TableChange(TablePath("shop", "orders"), None)),
    ("RenameTable", ["shop", "orders"], ["shop", "orders2"],
     TableChange(TablePath("shop", "orders"), TablePath("shop", "orders2"))),
])
def test_qualified_drop_and_rename_are_taken(root, name, new_name, expected):
    assert table_change(root, name, new_name) == expected


@pytest.mark.parametrize("root,name,new_name", [
    ("DropTable", ["orders"], None),                  # may be a session's temporary view: relayed
    ("RenameTable", ["orders"], ["orders2"]),
    ("RenameTable", ["shop", "orders"], ["orders2"]),
    ("DropTable", ["other_catalog", "shop", "orders"], None),
    ("DropView", ["shop_fresh", "orders"], None),
    ("AddColumns", ["shop", "orders"], None),
    ("Project", ["shop", "orders"], None),
])
def test_anything_else_goes_to_spark(root, name, new_name):
    assert table_change(root, name, new_name) is None


@pytest.mark.parametrize("statement,parsed", [
    ("DROP TABLE shop.orders", True),
    ("alter table shop.orders rename to shop.o2", True),
    ("SELECT 1", False),
    ("DROP VIEW shop_fresh.orders", False),
])
def test_only_candidates_are_parsed(statement, parsed):
    assert may_change_table(statement) is parsed
