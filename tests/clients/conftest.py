"""Fixtures shared by the client tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def hive_cursor_module(server):
    """One PyHive cursor through the gateway for a whole module (its set-up statements)."""
    from pyhive import hive

    conn = hive.connect("127.0.0.1", server.gateway.port, username="tester")
    yield conn.cursor()
    conn.close()
