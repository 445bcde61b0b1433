"""Time the gateway's authorisation (Spark's parse + PlanWalker + the rules)
on big and pathological statements, to show it is linear in the input.

    PYTHONPATH=. .venv/bin/python -m bench.bench_authorise
    PYTHONPATH=. .venv/bin/python -m bench.bench_authorise --decision-path

Starts a local SparkSession with tierlake's JVM classes (compiled into
``--home``/jars on first use). ``--decision-path`` instead starts an
in-process server (Iceberg's parser extensions, the real handler) and times
everything an ExecuteStatement goes through before it is relayed or answered:
``Authorizer.check`` for a reader with a password file, then the handler's
``route`` (CALL? tiered DDL? a cached sys read?), on SELECTs holding the
words the gateway's text heuristics used to react to; the time spent in
sqlglot is measured separately.
"""

from __future__ import annotations

import argparse
import tempfile
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


WORDS = ("'create table x tblproperties (table.datalake.enabled = true)' AS create_it, "
         "'alter table x set tblproperties (table.datalake.freshness = 1)' AS alter_it, "
         "'drop table sys.t; call sys.version()' AS sys_it, ")


def worded_select(size_kib: int) -> str:
    cols, n, total = [], 0, len(WORDS)
    while total < size_kib * 1024 - 64:
        cols.append(f"c{n} + 1 AS a{n}")
        total += len(cols[-1]) + 2
        n += 1
    return "SELECT " + WORDS + ", ".join(cols) + " FROM shop.t"


class SqlglotClock:
    """Time spent in sqlglot (outermost calls only) while installed."""

    def __init__(self):
        import sqlglot

        self.seconds, self.calls, self._depth, self._saved = 0.0, 0, 0, []
        for owner, name in ((sqlglot, "parse_one"), (sqlglot.Dialect, "tokenize"),
                            (sqlglot.tokens.Tokenizer, "tokenize"), (sqlglot.Dialect, "parse")):
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, self._timed(original))

    def _timed(self, original):
        def timed(*a, **kw):
            self._depth += 1
            started = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - started
                    self.calls += 1
        return timed

    def remove(self) -> None:
        for owner, name, original in self._saved:
            setattr(owner, name, original)


def decision_path(runs: int) -> None:
    """authorise + route, as the gateway's ExecuteStatement runs them, for a reader."""
    from bench.common import start_server
    from tierlake.server.gateway.auth.authz import Authorizer, SparkSessions
    from tierlake.server.gateway.auth.passwords import PasswordFile, set_user
    from tierlake.server.gateway.transport.protocol import SessionInfo, Statement

    server = start_server()
    try:
        passwords = Path(tempfile.mkdtemp(prefix="tierlake-bench-auth-")) / "passwords"
        set_user(passwords, "rita", "rita-pw", frozenset({"reader"}))
        authorizer = Authorizer(PasswordFile(passwords), server.registry, max_statement_size=1 << 20)
        authorizer.attach(SparkSessions(server.spark))
        handler = server.gateway.handler  # the server's own routes
        session = SessionInfo("rita", b"b" * 16, 9, "bench")

        def decide(text: str) -> bool:
            statement = Statement(text, session)
            authorizer.check("rita", statement)
            return handler.route(statement)

        decide("SELECT * FROM shop.t")  # warm-up
        print("| statement | bytes | authorise | wants | whole decision | in sqlglot | answered by |")
        print("|---|---|---|---|---|---|---|")
        for size in (128, 256, 512, 1024):
            text = worded_select(size)
            best = (float("inf"),)
            for _ in range(runs):
                clock = SqlglotClock()
                try:
                    statement = Statement(text, session)
                    t0 = time.perf_counter()
                    authorizer.check("rita", statement)
                    t1 = time.perf_counter()
                    wanted = handler.route(statement)
                    t2 = time.perf_counter()
                finally:
                    clock.remove()
                if t2 - t0 < best[0]:
                    best = (t2 - t0, t1 - t0, t2 - t1, clock.seconds, clock.calls, wanted)
            whole, auth, wants, in_sqlglot, calls, wanted = best
            print(f"| SELECT of {size} KiB with the words | {len(text)} | {auth * 1000:.0f} ms | "
                  f"{wants * 1000:.1f} ms | {whole * 1000:.0f} ms | {in_sqlglot * 1000:.1f} ms ({calls} calls) | "
                  f"{'the gateway' if wanted else 'Spark (relayed)'} |")
        dashes(server.spark, authorizer, session)
    finally:
        server.stop()


def dashes(spark, authorizer, session) -> None:
    """A line of '-' with no newline after it: what Iceberg's parser makes of
    it (its regexes go quadratic), and the gateway's refusal before any parser."""
    from tierlake.server.exceptions import StatementTooLargeError

    print()
    print("| statement | bytes | Spark's parse (Iceberg's extensions) | the gateway's check |")
    print("|---|---|---|---|")
    parser = spark._jsparkSession.sessionState().sqlParser()
    for size in (8, 16, 32, 1000):  # KiB
        text = "SELECT 1 " + "-" * (size * 1024 - 16)
        spark_ms = "not run (quadratic)"
        if size <= 32:
            started = time.perf_counter()
            parser.parsePlan(text)
            spark_ms = f"{(time.perf_counter() - started) * 1000:.0f} ms"
        started = time.perf_counter()
        try:
            authorizer.check("rita", text, session)
            verdict = "allowed"
        except StatementTooLargeError:
            verdict = "refused"
        print(f"| SELECT 1 + {size} KiB of '-' | {len(text)} | {spark_ms} | "
              f"{verdict} in {(time.perf_counter() - started) * 1000:.1f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", default=".tierlake-bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--decision-path", action="store_true",
                        help="time authorise + wants in an in-process server instead")
    args = parser.parse_args()
    if args.decision_path:
        decision_path(args.runs)
        return
    from pyspark.sql import SparkSession

    from tierlake.server.gateway.auth.authz import Authorizer, SparkSessions
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
