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
