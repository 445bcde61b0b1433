"""Acknowledged writes survive ``kill -9``; retries with request ids never
duplicate, across a restart; another Spark application writing the same
stream table through the server's metastore (with Iceberg's Hive locks)
interleaves with the gateway's writers without losing a commit.

Each test runs its own ``tierlake server`` process (tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from pyhive import hive

from tests.conftest import free_port, start_server_process, stop_process, subprocess_env

pytestmark = pytest.mark.integration

TABLES = {
    "shop.events": "CREATE TABLE shop.events (id BIGINT, msg STRING) TBLPROPERTIES "
                   "('table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')",
    "shop.orders": "CREATE TABLE shop.orders (id BIGINT, msg STRING) TBLPROPERTIES "
                   "('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2', "
                   "'table.datalake.freshness'='1 s')",
}


def connect(port: int):
    return hive.connect("127.0.0.1", port, username="tester")


def query(port: int, statement: str) -> list[tuple]:
    with connect(port) as conn:
        cursor = conn.cursor()
        cursor.execute(statement)
        return cursor.fetchall()


def create_tables(port: int) -> None:
    with connect(port) as conn:
        cursor = conn.cursor()
        cursor.execute("CREATE DATABASE shop")
        for ddl in TABLES.values():
            cursor.execute(ddl)


def statement(table: str, writer: int, n: int) -> str:
    base = writer * 10_000 + n * 10
    if table == "shop.orders":  # upserts: NULL change types
        return f"INSERT INTO {table} (id, msg, _change_type) VALUES " + ", ".join(
            f"({base + r}, 'w{writer}-{n}', NULL)" for r in range(5))
    return f"INSERT INTO {table} (id, msg) VALUES " + ", ".join(f"({base + r}, 'w{writer}-{n}')" for r in range(5))


class Writer(threading.Thread):
    """Sends tagged statements until stopped; records what was acknowledged
    and what was in flight when the connection broke."""

    def __init__(self, port: int, table: str, number: int):
        super().__init__(daemon=True)
        self.port, self.table, self.number = port, table, number
        self.acked: list[int] = []
        self.unknown: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        try:
            conn = connect(self.port)
            cursor = conn.cursor()
        except Exception:  # noqa: BLE001 - the server is already gone
            return
        while not self.stop.is_set():
            try:
                cursor.execute(f"SET `tierlake.write.request-id`=w{self.number}-{n}")
                cursor.execute(statement(self.table, self.number, n))
                self.acked.append(n)
            except Exception:  # noqa: BLE001 - the server died mid-statement: outcome unknown
                self.unknown.append(n)
                return
            n += 1


def resend(port: int, writer: Writer, numbers: list[int]) -> None:
    with connect(port) as conn:
        cursor = conn.cursor()
        for n in numbers:
            cursor.execute(f"SET `tierlake.write.request-id`=w{writer.number}-{n}")
            cursor.execute(statement(writer.table, writer.number, n))


def expected_ids(writers: list[Writer], table: str) -> list[int]:
    return sorted(w.number * 10_000 + n * 10 + r for w in writers if w.table == table
                  for n in w.acked + w.unknown for r in range(5))


def lake_ids(port: int, writers: list[Writer], timeout: float) -> dict[str, list[int]]:
    """Each stream table's lake ids once they equal what ``writers`` wrote, or as they are at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        lake = {t: sorted(r[0] for r in query(port, f"SELECT id FROM shop_lake.{t.split('.')[1]}")) for t in TABLES}
        if all(lake[t] == expected_ids(writers, t) for t in TABLES) or time.monotonic() >= deadline:
            return lake
        time.sleep(1)


def test_kill_9_after_acknowledgements_loses_nothing_and_retries_never_duplicate(tmp_path):
    port = free_port()
    home = tmp_path / "home"
    # The rounds the killed server owned are taken back after the heartbeat timeout.
    conf = ["tierlake.tiering.heartbeat-timeout=8 s"]
    server = start_server_process(home, port, conf, workers=1)
    try:
        create_tables(port)
        writers = [Writer(port, table, n) for n, table in enumerate(list(TABLES) * 4)]
        for w in writers:
            w.start()
        deadline = time.monotonic() + 60
        while sum(len(w.acked) for w in writers) < 120 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(server.pid, signal.SIGKILL)  # right after acknowledgements, writers still sending
        server.wait()
        for w in writers:
            w.stop.set()
            w.join(timeout=60)
        acked = sum(len(w.acked) for w in writers)
        assert acked >= 120

        server = start_server_process(home, port, conf, workers=1)
        for table in TABLES:
            ids = [r[0] for r in query(port, f"SELECT id FROM {table}")]
            assert len(ids) == len(set(ids)), f"{table}: a row twice"
            for w in writers:
                if w.table == table:
                    for n in w.acked:
                        assert w.number * 10_000 + n * 10 in ids, f"{table}: acknowledged write w{w.number}-{n} lost"
        # Every writer sends its last acknowledged statement and the one in flight again, with their ids.
        for w in writers:
            resend(port, w, w.acked[-1:] + w.unknown)
        for table in TABLES:
            ids = sorted(r[0] for r in query(port, f"SELECT id FROM {table}"))
            assert ids == expected_ids(writers, table)
        # And tiering moves each row to the lake once.
        lake = lake_ids(port, writers, timeout=120)
        for table in TABLES:
            assert lake[table] == expected_ids(writers, table)
    finally:
        stop_process(server)


EXTERNAL_WRITER = """
import sys
from tierlake.server.app import JVM_FEATURES
from tierlake.server.config.config import Config
from tierlake.server.runtime.session import build_spark
from tests.conftest import free_port

home, uri, warehouse, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
config = Config.load(home=home, conf={"tierlake.master": "local[1]", "spark.sql.shuffle.partitions": "1",
                                      "spark.hadoop.hive.metastore.uris": uri, "spark.sql.warehouse.dir": warehouse})
spark = build_spark(config, free_port(), JVM_FEATURES, owns_metastore=False)
assert spark.conf.get("spark.hadoop.iceberg.engine.hive.lock-enabled", "true") == "true"
for i in range(n):
    spark.sql(f"INSERT INTO shop.events VALUES ({900000 + i * 10}, 'external'), ({900001 + i * 10}, 'external')")
print("done", flush=True)
spark.stop()
"""


def test_an_external_spark_writer_with_hive_locks_interleaves_with_gateway_writers(tmp_path):
    port, metastore_port = free_port(), free_port()
    home = tmp_path / "home"
    server = start_server_process(home, port, [f"tierlake.metastore.port={metastore_port}"], workers=0)
    try:
        create_tables(port)
        warehouse = (home / "warehouse").resolve().as_uri()
        external = subprocess.Popen(
            [sys.executable, "-c", EXTERNAL_WRITER, str(tmp_path / "external"), f"thrift://127.0.0.1:{metastore_port}",
             warehouse, "25"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
        writers = [Writer(port, "shop.events", n) for n in range(6)]
        for w in writers:
            w.start()
        out, err = external.communicate(timeout=600)
        for w in writers:
            w.stop.set()
            w.join(timeout=120)
        assert external.returncode == 0 and "done" in out, err[-20000:]
        assert all(not w.unknown for w in writers), "a gateway write failed"
        ids = sorted(r[0] for r in query(port, "SELECT id FROM shop.events"))
        mine = expected_ids(writers, "shop.events")
        theirs = [900000 + i * 10 + r for i in range(25) for r in range(2)]
        assert sum(len(w.acked) for w in writers) > 0
        assert ids == sorted(mine + theirs)
    finally:
        stop_process(server)
