"""``tierlake://`` under SQLAlchemy 1.4 and 2.x, each from a client-only install.

SQLAlchemy 2 is the server's own environment; SQLAlchemy 1.4 is a venv with
only ``tierlake-client``, ``sqlalchemy<2`` and pandas 2.1 (what Superset 6 pins).
The same probe (tests/clients/sqlalchemy_probe.py) runs in each against the
live gateway: inspector, ``pandas.read_sql`` of a query, a CALL and a view,
and a Core select over a reflected table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.venvs import client_venv

PROBE = Path(__file__).with_name("sqlalchemy_probe.py")
SCHEMA = "sqla_versions"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def user_table(hive_cursor_module):
    c = hive_cursor_module
    c.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
    c.execute(f"DROP TABLE IF EXISTS {SCHEMA}.orders")
    c.execute(f"CREATE TABLE {SCHEMA}.orders (id BIGINT, region STRING, amount DECIMAL(10,2), placed TIMESTAMP) "
              "USING iceberg")
    c.execute(f"INSERT INTO {SCHEMA}.orders VALUES (1, 'north', 10.50, timestamp'2024-01-02 03:04:05'), "
              "(2, 'north', 4.25, NULL), (3, 'south', 7.00, NULL)")
    return "orders"


@pytest.fixture(scope="module", params=["1.4", "2"])
def python(request):
    if request.param == "2":
        return sys.executable  # the server's environment (sqlalchemy>=2)
    # pandas 2.2 reads only through SQLAlchemy 2; hosts on 1.4 (Superset 6:
    # pandas 2.1) keep an older pandas.
    return str(client_venv("sqlalchemy14", ["sqlalchemy>=1.4,<2", "pandas>=2.0,<2.2", "numpy<2"]) / "python")


def test_the_client_alone_reflects_and_reads_through_pandas(python, server, user_table):
    url = f"tierlake://tester:pw@127.0.0.1:{server.gateway.port}/default"
    done = subprocess.run([python, str(PROBE), url, SCHEMA, user_table], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    major = out["sqlalchemy"].split(".")[0]
    assert major == ("1" if python != sys.executable else "2")
    assert {"sys", SCHEMA} <= set(out["schemas"])
    assert {"lake_tiering_status", "lake_tiering_lag", "tiering_rounds"} <= set(out["sys_views"])
    assert "tiering_tables" in out["sys_tables"] and "lake_tiering_status" not in out["sys_tables"]
    assert user_table in out["user_tables"]
    assert out["columns"] == [["id", "BigInteger"], ["region", "String"], ["amount", "SparkDecimal"],
                              ["placed", "SparkTimestamp"]]
    assert out["has_table"] == [True, False]
    assert out["read_sql"] == {"columns": ["id", "region", "amount"], "ids": [1, 2], "amounts": [10.5, 4.25]}
    assert {"tierlake", "spark", "iceberg"} <= {c.lower() for c in out["read_sql_call"]}
    assert out["read_sql_view"][:3] == ["database_name", "table_name", "status"]
    assert out["core_select"] == [["north", 2], ["south", 1]]
