"""Shared bench helpers: an in-process server on a scratch home (on ``local[2]``
or a Spark cluster: ``--master``), timing."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

LOCAL_MASTER = "local[2]"


def add_master_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master", default=LOCAL_MASTER,
        help=f"the server's Spark master (default {LOCAL_MASTER}); 'standalone': a standalone master and one "
             "worker (2 cores, 2g) from pyspark's jars, started for the run on loopback (tests/standalone.py); "
             "spark://HOST:PORT: a running cluster")


@contextlib.contextmanager
def spark_master(master: str) -> Iterator[dict[str, str]]:
    """The server settings that run it on ``master``; ``standalone`` starts a
    local standalone cluster for the block and stops it after. A cluster's
    application gets one executor of 2 cores (as many task slots as
    ``local[2]``) and 1 GB."""
    if master.startswith("local"):
        yield {"tierlake.master": master}
        return
    cluster = None
    if master == "standalone":
        from tests.standalone import LocalStandalone

        cluster = LocalStandalone(cores=2, memory="2g").start()
        master = cluster.url
    try:
        yield {"tierlake.master": master, "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
               "spark.cores.max": "2", "spark.executor.cores": "2", "spark.executor.memory": "1g"}
    finally:
        if cluster is not None:
            cluster.stop()


def start_server(**conf: str):
    from tierlake.server.app import Server
    from tierlake.server.runtime.config import Config
    from tierlake.server.runtime.log_setup import configure_python_logging

    home = tempfile.mkdtemp(prefix="tierlake-bench-")
    settings = {"tierlake.master": LOCAL_MASTER, "tierlake.gateway.port": "0",
                "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "4g"}
    settings.update(conf)
    config = Config.load(home=home, conf=settings)
    configure_python_logging(config.logs_dir)
    return Server(config).start()


def sample(fn: Callable[[], object], runs: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def row(label: str, values: list[float], baseline: list[float] | None = None) -> str:
    text = f"| {label} | {statistics.median(values) * 1000:.0f} ms | {p(values, 0.95) * 1000:.0f} ms |"
    if baseline is not None:
        text += f" {statistics.median(values) / statistics.median(baseline):.2f}× |"
    else:
        text += " — |"
    return text
