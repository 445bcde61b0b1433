"""A stock Hive metastore service (Hive 2.3, the jars pyspark ships) on loopback.

``org.apache.hadoop.hive.metastore.HiveMetaStore`` in its own JVM with its own
Derby database: none of tierlake's classes are on its class path, so its
``alter_table`` is Hive's own, without any compare-and-set. Hive's
transaction tables (HIVE_LOCKS …), which Iceberg's metastore locks need, are
created first with Hive's own ``TxnDbUtil.prepDb``, as ``schematool`` would
for an operator (the service's ``hive.in.test`` would create them too, but
also refuses the lock requests Iceberg sends).
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pyspark

PREP_DB = """
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.txn.TxnDbUtil;

public class PrepDb {
    public static void main(String[] args) throws Exception {
        HiveConf conf = new HiveConf();
        conf.set("javax.jdo.option.ConnectionURL", args[0]);
        conf.set("javax.jdo.option.ConnectionDriverName", "org.apache.derby.jdbc.EmbeddedDriver");
        TxnDbUtil.prepDb(conf);
    }
}
"""


class StockMetastore:
    """``lock_tables=False``: the schema only as DataNucleus' auto-create makes it (no HIVE_LOCKS …),
    as a metastore set up without ``schematool`` has it."""

    def __init__(self, port: int, directory: Path, lock_tables: bool = True):
        self.port, self.directory, self.lock_tables = port, directory, lock_tables
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        return (self.directory / "warehouse").resolve().as_uri()

    def start(self, timeout: float = 120) -> StockMetastore:
        jars = Path(pyspark.__file__).parent / "jars"
        self.directory.mkdir(parents=True, exist_ok=True)
        url = f"jdbc:derby:;databaseName={self.directory / 'db'};create=true"
        if self.lock_tables:
            prep = self.directory / "PrepDb.java"
            prep.write_text(PREP_DB)
            subprocess.run(["java", f"-Dderby.system.home={self.directory}", "-cp", f"{jars}/*", str(prep), url],
                           check=True, capture_output=True, timeout=300)
        conf = {
            "hive.async.log.enabled": "false",  # Hive's async log4j2 loggers need a jar pyspark lacks
            "javax.jdo.option.ConnectionURL": url,
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": self.warehouse,
        }
        args = ["java", "-Xmx512m", f"-Dderby.system.home={self.directory}", "-cp", f"{jars}/*",
                "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(self.port)]
        for key, value in conf.items():
            args += ["--hiveconf", f"{key}={value}"]
        log = open(self.directory / "metastore.log", "wb")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.directory / "metastore.log").read_text()[-3000:]
                raise RuntimeError(f"the Hive metastore exited: {tail}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("the Hive metastore did not start listening")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# A line of the scenario subprocess's stdout that carries its result (JSON).
RESULT = "RESULT "


def scenario_on_stock_metastore(tmp_path: Path, module: str, function: str) -> dict:
    """Run ``module.function(server)`` in a subprocess whose tierlake server uses a stock metastore
    service (one Spark per process), and return what it returned (JSON-able)."""
    import json
    import sys

    from tests.conftest import free_port, subprocess_env

    metastore = StockMetastore(free_port(), tmp_path / "hms").start()
    try:
        done = subprocess.run(
            [sys.executable, "-c", f"from tests.hive_metastore import _serve_scenario; _serve_scenario("
                                   f"{module!r}, {function!r}, {metastore.uri!r}, {metastore.warehouse!r}, "
                                   f"{str(tmp_path / 'home')!r})"],
            capture_output=True, text=True, env=subprocess_env(), timeout=900)
    finally:
        metastore.stop()
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, (done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    result = json.loads(lines[-1][len(RESULT):])
    print(result)
    return result


def _serve_scenario(module: str, function: str, uri: str, warehouse: str, home: str) -> None:
    """The subprocess: a server on the stock metastore, the scenario, its result on stdout."""
    import importlib
    import json

    from tierlake.server.app import Server
    from tierlake.server.config.config import Config
    from tierlake.server.runtime.log_setup import configure_python_logging

    config = Config.load(home=Path(home), conf={
        "tierlake.master": "local[1]",
        "tierlake.gateway.port": "0",
        "spark.sql.shuffle.partitions": "1",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "tierlake.tiering.workers": "0",
        "spark.hadoop.hive.metastore.uris": uri,
        "spark.sql.warehouse.dir": warehouse,
    })
    configure_python_logging(config.logs_dir)
    server = Server(config).start()
    try:
        result = getattr(importlib.import_module(module), function)(server)
        print(RESULT + json.dumps(result), flush=True)
    finally:
        server.stop()
