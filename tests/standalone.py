"""A Spark standalone master and one worker from pyspark's own jars, on loopback.

The same classes ``sbin/start-master.sh`` / ``start-worker.sh`` run (pip's
pyspark ships neither script), started directly with ``java -cp jars/*``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.conftest import free_port
from tierlake.server.runtime.jars import pyspark_jars_dir


class LocalStandalone:
    """``start()`` → ``url`` (spark://127.0.0.1:PORT); ``apps()``; ``stop()``."""

    def __init__(self, cores: int = 2, memory: str = "2g"):
        self.cores, self.memory = cores, memory
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tierlake-standalone-"))
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _java(self, name: str, cls: str, *args: str) -> subprocess.Popen:
        spark_home = pyspark_jars_dir().parent
        scala = next(spark_home.glob("jars/scala-library-*.jar")).stem.split("-")[-1]
        # The worker starts executors with $SPARK_HOME/jars on their class
        # path; without SPARK_SCALA_VERSION (bin/load-spark-env.sh sets it)
        # its launcher looks for a source build ("Cannot find any build directories").
        env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_SCALA_VERSION=".".join(scala.split(".")[:2]), SPARK_LOCAL_DIRS=str(self.root / "local"))
        log = open(self.root / f"{name}.log", "w")
        proc = subprocess.Popen(["java", "-Xmx512m", "-cp", str(spark_home / "jars" / "*"), cls, *args],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 120) -> LocalStandalone:
        self._java("master", "org.apache.spark.deploy.master.Master",
                   "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port))
        self._java("worker", "org.apache.spark.deploy.worker.Worker", self.url,
                   "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                   "--work-dir", str(self.root / "work"), "--webui-port", str(self.worker_ui_port))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.state().get("aliveworkers", 0) >= 1:
                    return self
            except OSError:
                pass
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"standalone {proc.args[4]} exited: {self.logs()}")
            time.sleep(0.5)
        raise RuntimeError(f"no standalone worker registered in {timeout}s: {self.logs()}")

    def state(self) -> dict:
        """The master's JSON status (workers, active applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def apps(self) -> list[dict]:
        return self.state().get("activeapps", [])

    def logs(self) -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)
