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

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.conftest import free_port, subprocess_env
from tests.hive_metastore import StockMetastore

pytestmark = pytest.mark.integration
RESULT = "RESULT "


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


def _scenario(uri: str, warehouse: str, home: str) -> None:
    """The subprocess: a server on the stock metastore, the race, its result on stdout."""
    from tierlake.server.app import Server
    from tierlake.server.config.config import Config
    from tierlake.server.runtime.log_setup import configure_python_logging

    config = Config.load(home=Path(home), conf={
        "tierlake.master": "local[1]",
        "tierlake.gateway.port": "0",
        "spark.sql.shuffle.partitions": "1",
        "spark.driver.memory": "1g",
        "tierlake.tiering.workers": "0",
        "spark.hadoop.hive.metastore.uris": uri,
        "spark.sql.warehouse.dir": warehouse,
    })
    configure_python_logging(config.logs_dir)
    server = Server(config).start()
    try:
        print(RESULT + json.dumps(_race(server.spark, server.gateway.port)), flush=True)
    finally:
        server.stop()


def test_a_replace_racing_another_through_a_stock_metastore_is_never_written_over(tmp_path):
    metastore = StockMetastore(free_port(), tmp_path / "hms").start()
    try:
        done = subprocess.run(
            [sys.executable, "-c", f"from {__name__} import _scenario; _scenario({metastore.uri!r}, "
                                   f"{metastore.warehouse!r}, {str(tmp_path / 'home')!r})"],
            capture_output=True, text=True, env=subprocess_env(), timeout=900)
    finally:
        metastore.stop()
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, (done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    result = json.loads(lines[-1][len(RESULT):])
    print(result)
    assert result["paused"], f"the first replace's text write never reached its pause: {result}"
    assert not result["errors"], result
    # Both replaces acknowledged; the later one is the view (before the lock: [[2]], its replace lost).
    assert result["shown"] == [[3]], result
    assert result["entry_metadata"] == result["newest_metadata"], \
        f"the metastore entry names an older Iceberg view version: {result}"
    assert result["locks_left"] == 0, result
