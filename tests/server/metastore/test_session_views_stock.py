"""Two replaces of one ordinary Iceberg view racing through a stock Hive metastore service.

After Iceberg's replace, the session catalog (server/metastore/java/SessionViews.java)
writes the view's text into the metastore entry, which Spark resolves the view by.
That write is a read and an alter of the whole entry: on a metastore that runs no
tierlake code (a metastore service, a shared database) a replace landing between
the read and the write was written over with the older ``metadata_location`` the
read saw — the later replace, acknowledged, was lost and the view went back to the
earlier one. The write now holds Hive's EXCLUSIVE lock on the view, the lock
Iceberg's own view commits take, so the later replace waits for it instead.

The race is made certain with a pause between the read and the write
(``SessionViews.pauseBeforeWrite``, for tests): the second replace starts while
the first is paused. Runs in a subprocess with its own server (one Spark per process).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.hive_metastore import scenario_on_stock_metastore

pytestmark = pytest.mark.integration


def _race(spark, port: int) -> dict:
    from pyhive import hive

    views = spark.sparkContext._jvm.io.tierlake.internal.SessionViews
    setup = hive.connect("127.0.0.1", port, username="tester").cursor()
    setup.execute("CREATE DATABASE IF NOT EXISTS shop")
    setup.execute("CREATE VIEW shop.v AS SELECT 1 AS a")
    errors: list[str] = []

    def replace(value: int) -> None:
        try:
            hive.connect("127.0.0.1", port, username="tester").cursor().execute(
                f"CREATE OR REPLACE VIEW shop.v AS SELECT {value} AS a")
        except Exception as e:  # noqa: BLE001 - reported in the result
            errors.append(f"{value}: {e}")

    before = int(views.pausedWrites())
    views.pauseBeforeWrite(4000)
    first = threading.Thread(target=replace, args=(2,))
    first.start()
    deadline = time.monotonic() + 120
    while int(views.pausedWrites()) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    paused = int(views.pausedWrites()) > before
    views.pauseBeforeWrite(0)
    # The later replace, while the first one's text write sits between its read and its write.
    second = threading.Thread(target=replace, args=(3,))
    second.start()
    first.join(timeout=300)
    second.join(timeout=300)
    setup.execute("SELECT a FROM shop.v")
    shown = setup.fetchall()
    jvm = spark.sparkContext._jvm
    client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark._jsc.hadoopConfiguration(), jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf")))
    try:
        entry = client.getTable("shop", "v")
        location = str(entry.getParameters().get("metadata_location"))
        locks = jvm.org.apache.hadoop.hive.metastore.api.ShowLocksRequest()
        locks.setDbname("shop")
        locks.setTablename("v")
        locks_left = len(client.showLocks(locks).getLocks())
    finally:
        client.close()
    directory = Path(unquote(urlparse(location).path)).parent
    versions = sorted((int(m.group(1)), f) for f in os.listdir(directory)
                      if (m := re.match(r"(\d+)-.*\.metadata\.json$", f)))
    return {"paused": paused, "errors": errors, "shown": [list(r) for r in shown],
            "entry_metadata": Path(unquote(urlparse(location).path)).name, "newest_metadata": versions[-1][1],
            "versions": len(versions), "locks_left": locks_left}


def _stock_race(server) -> dict:
    """The subprocess's scenario (tests/hive_metastore.py)."""
    return _race(server.spark, server.gateway.port)


def test_a_replace_racing_another_through_a_stock_metastore_is_never_written_over(tmp_path):
    result = scenario_on_stock_metastore(tmp_path, __name__, "_stock_race")
    assert result["paused"], f"the first replace's text write never reached its pause: {result}"
    assert not result["errors"], result
    # Both replaces acknowledged; the later one is the view (before the lock: [[2]], its replace lost).
    assert result["shown"] == [[3]], result
    assert result["entry_metadata"] == result["newest_metadata"], \
        f"the metastore entry names an older Iceberg view version: {result}"
    assert result["locks_left"] == 0, result
