"""Which lake table a worker tiers into (no JVM): the registered one, else the configured suffix."""

from __future__ import annotations

import ast
from pathlib import Path

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.catalog.tiered_tables import LAKE_TABLE_PROPERTY, lake_of, lake_path
from tierlake.server.config.config import Config

STREAM = TablePath("shop", "orders")


def test_the_registered_lake_table_wins_over_the_suffix():
    config = Config(Path("/nonexistent"), {"tierlake.lake.database-suffix": "_iceberg"})
    assert lake_of(config, STREAM, {LAKE_TABLE_PROPERTY: "archive.orders_v2"}) == TablePath("archive", "orders_v2")


def test_a_stream_without_a_registered_lake_table_honours_the_suffix():
    config = Config(Path("/nonexistent"), {"tierlake.lake.database-suffix": "_iceberg"})
    assert lake_of(config, STREAM, {}) == TablePath("shop_iceberg", "orders")
    assert lake_path(config, STREAM) == TablePath("shop_iceberg", "orders")
    assert lake_of(None, STREAM, {}) == TablePath("shop_lake", "orders")


def test_the_worker_has_no_suffix_of_its_own():
    """No string in the worker's code names a lake suffix (names such as ``after_lake_commit`` are not strings)."""
    source = (Path(__file__).resolve().parents[3] / "server" / "tiering" / "worker.py").read_text()
    strings = [node.value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    assert strings and not [s for s in strings if "_lake" in s]
