"""Time the gateway's authorisation (Spark's parse + PlanWalker + the rules)
on big and pathological statements, to show it is linear in the input.

    PYTHONPATH=. .venv/bin/python -m bench.bench_authorise

Starts a local SparkSession with tierlake's JVM classes (compiled into
``--home``/jars on first use).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def statements() -> list[tuple[str, str]]:
    out = []
    for size in (128, 256, 512, 1024):  # KiB
        cols, n = [], 0
        while sum(len(c) + 2 for c in cols) < size * 1024 - 64:
            cols.append(f"c{n} + 1 AS a{n}")
            n += 1
        out.append((f"SELECT of {size} KiB ({n} columns)", "SELECT " + ", ".join(cols) + " FROM t"))
    for size in (128, 256, 512, 1024):
        out.append((f"SET + {size} KiB of spaces + x", "SET" + " " * (size * 1024 - 8) + "x"))
    for size in (128, 256, 512, 1024):
        out.append((f"string literal of {size} KiB", "SELECT '" + "y" * (size * 1024 - 16) + "'"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", default=".tierlake-bench")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    from tierlake.server.gateway.authz import Authorizer, SparkSessions
    from tierlake.server.runtime.javaext import internal_jar

    jar = internal_jar(Path(args.home))
    spark = (SparkSession.builder.master("local[1]").config("spark.driver.extraClassPath", str(jar))
             .config("spark.ui.enabled", "false").config("spark.sql.variable.substitute", "false").getOrCreate())
    authorizer = Authorizer(None, max_statement_size=2 << 20).attach(SparkSessions(spark))
    authorizer.requirement("SELECT 1")  # warm-up
    print("| statement | bytes | best of runs | role |")
    print("|---|---|---|---|")
    for name, text in statements():
        best, role = float("inf"), "?"
        for _ in range(args.runs):
            started = time.perf_counter()
            try:
                role = authorizer.requirement(text).role
            except Exception as exc:  # noqa: BLE001 - a refusal is a result too
                role = type(exc).__name__
            best = min(best, time.perf_counter() - started)
        print(f"| {name} | {len(text)} | {best * 1000:.0f} ms | {role} |")
    spark.stop()


if __name__ == "__main__":
    main()
