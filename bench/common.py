"""Shared bench helpers: an in-process server on a scratch home, timing."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable


def start_server(**conf: str):
    from tierlake.server.app import Server
    from tierlake.server.runtime.config import Config
    from tierlake.server.runtime.log_setup import configure_python_logging

    home = tempfile.mkdtemp(prefix="tierlake-bench-")
    settings = {"tierlake.master": "local[2]", "tierlake.gateway.port": "0",
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
