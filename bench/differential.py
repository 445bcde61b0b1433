"""The differential harness's long mode (issue 50 item 5): many generated cases against one server,
each compared with plain Spark SQL on plain Iceberg tables (tests/server/differential/harness.py),
counting divergences by class instead of stopping at the first.

Command (the long run of bench/RESULTS.md):

    nice -n 19 env PYTHONPATH=. .venv/bin/python -m bench.differential --cases 10000 --seed 5 --threads 8 \
        --no-cleanup --progress 50 [--minutes 110] [--explicit] [--examples-out f]

Prints one line per case that diverged (its stage and message), a progress line every ``--progress``
cases (cases, wall and CPU seconds per case overall and since the last line, reads batched), and at
the end the number of cases run, the number that diverged, and per divergence class the count and
the smallest example seen (by the size of its description). ``--minutes`` stops early; the count
printed is what ran. CPU seconds are this process's and its children's (the server's JVM): a case's
cost that does not depend on how busy the shared machine is.

Each case is one database (its stream, lake, fresh view and the reference tables), dropped after it
(``--no-cleanup``: kept until the run ends and the server's home is removed; a drop is product work,
about a fifth of a case's CPU time, and checks nothing). ``--threads`` cases run side by side, each
thread with a session of its own for its rounds (as a worker's round threads) and one for the
harness's own statements. Their reads go through one :class:`~tests.server.differential.harness.Batcher`
(``--no-batch``: each alone): the comparisons waiting at a time are sent as one query, in sessions
with :data:`~tests.server.differential.harness.FEW_ROWS_SETTINGS` (``--server-settings``: the
server's); a comparison that shows a difference in a batch is checked again alone before it counts.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sys
import threading
import time
import traceback

from hypothesis.control import BuildContext
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture.data import ConjectureData

from bench.common import start_server
from tests.server.differential.harness import Batcher, Divergence, Harness, harness_session, short_retention
from tests.server.differential.strategies import EXPLICIT_CASES, Case, cases
from tierlake.server.changelog import lake_write
from tierlake.server.runtime.session import private_session


def cpu_seconds() -> float:
    """CPU time of this process and its descendants (the server's JVM, pyspark's workers), user +
    system: a case's cost that does not depend on how busy the shared machine is."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = collections.defaultdict(list)
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children[int(fields[1])].append(int(entry))
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def nice_server_jvm() -> int:
    """The server's JVM runs in a session of its own (session._start_jvm), so with the kernel's
    autogroups a ``nice`` of this process does not reach it: its group competes with every other
    session's at full weight. Give that group this process's niceness (the run yields to others'
    work, as ``nice -n 19`` means); returns it (0: nothing done)."""
    niceness = os.nice(0)
    if niceness <= 0:
        return 0
    mine = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent == mine:
                with open(f"/proc/{entry}/autogroup", "w") as f:
                    f.write(str(niceness))
        except OSError:
            continue
    return niceness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first", type=int, default=0, help="the number of the first generated case (resume)")
    parser.add_argument("--minutes", type=float, default=0.0, help="stop after this long (0: no limit)")
    parser.add_argument("--threads", type=int, default=1, help="cases run side by side (each thread its own session)")
    parser.add_argument("--no-batch", action="store_true", help="each read alone, not sent with other cases' reads")
    parser.add_argument("--server-settings", action="store_true",
                        help="the harness's own sessions with the server's settings, not harness.FEW_ROWS_SETTINGS")
    parser.add_argument("--max-wait", type=float, default=2.0,
                        help="the longest a read waits for others to be sent with (seconds)")
    parser.add_argument("--no-cleanup", action="store_true",
                        help="keep each case's tables (the server's home is removed after it stops)")
    parser.add_argument("--nice-jvm", action="store_true",
                        help="give the server JVM's scheduling group (autogroup) this process's niceness")
    parser.add_argument("--jvm-options", default="",
                        help="the server JVM's extra options (spark.driver.extraJavaOptions), e.g. JIT or GC settings")
    parser.add_argument("--explicit", action="store_true",
                        help="run the explicit cases (issue 50's reproductions) before the generated ones")
    parser.add_argument("--verbose", action="store_true", help="a line per case with its duration")
    parser.add_argument("--progress", type=int, default=10, help="a progress line every this many cases")
    parser.add_argument("--examples-out", help="write every divergence (class, message, case) as JSON lines")
    args = parser.parse_args(argv)

    few_rows = not args.server_settings
    started, cpu_started = time.monotonic(), cpu_seconds()
    deadline = started + args.minutes * 60 if args.minutes else None
    lock = threading.Lock()
    ran = diverged = 0
    classes: dict[str, list] = collections.defaultdict(list)
    out = open(args.examples_out, "a") if args.examples_out else None
    totals = collections.Counter()  # reads batched / batches / alone, over every server
    last = {"ran": 0, "elapsed": 0.0, "cpu": 0.0}  # at the last progress line

    def record(case, error: BaseException) -> None:
        nonlocal diverged
        stage = getattr(error, "stage", f"harness-error:{type(error).__name__}")
        text = str(error) if isinstance(error, Divergence) else traceback.format_exc(limit=4)
        description = case.describe()
        with lock:
            diverged += 1
            classes[stage].append((len(description), description, text))
            print(f"DIVERGENCE {stage}: {text[:600]}", flush=True)
            if out:
                out.write(json.dumps({"stage": stage, "message": text, "case": description}) + "\n")
                out.flush()

    # Each case drawn on its own from the same strategy as the default suite, from its own seed
    # (Hypothesis's generate phase mutates earlier examples, so its consecutive cases look alike);
    # never shrunk: the long mode counts, the default suite shrinks.
    draw_lock = threading.Lock()  # Hypothesis draws one at a time (its lambda descriptions parse source: not
    # thread-safe, "AST constructor recursion depth mismatch")

    def draw(i: int):
        with draw_lock:
            return draw_alone(i)

    def draw_alone(i: int):
        for attempt in range(100):  # a draw a filter rejects is drawn again from the next seed
            data = ConjectureData(random=random.Random((args.seed * 1_000_003 + i) * 101 + attempt))
            try:
                with BuildContext(data, is_final=False, wrapped_test=None):
                    return data.draw(cases())
            except StopTest:
                continue
        raise RuntimeError(f"case {i}: no valid draw in 100 attempts")

    pending: list = ((list(EXPLICIT_CASES) if args.explicit else [])
                     + list(range(args.first, args.first + args.cases)))

    def expired() -> bool:
        return bool(deadline and time.monotonic() > deadline)

    def serve() -> None:
        """The cases on one new server, ``args.threads`` at a time."""
        print("starting the server", flush=True)
        settings = {"tierlake.tiering.workers": "0", "spark.ui.showConsoleProgress": "false"}
        if args.jvm_options:
            settings["spark.driver.extraJavaOptions"] = args.jvm_options
        server = start_server(**settings)
        niced = nice_server_jvm() if args.nice_jvm else 0
        print("server ready" + (f" (its JVM's scheduling group niced to {niced})" if niced else ""), flush=True)
        batcher = None if args.no_batch else Batcher(server.spark, max_wait=args.max_wait, few_rows=few_rows)
        sessions = threading.local()

        def new_harness() -> Harness:
            # Each thread's rounds in a session of its own, as a worker's round threads; the harness's
            # own statements in another (harness.FEW_ROWS_SETTINGS).
            if getattr(sessions, "rounds", None) is None:
                sessions.rounds = private_session(server.spark)
                lake_write.restore(sessions.rounds, {k: None for k in lake_write.BUCKETED_MERGE_CONF})
                sessions.reference = harness_session(server.spark, few_rows)
                sessions.pool = []
            return Harness(server, cleanup=not args.no_cleanup, spark=sessions.rounds, batcher=batcher,
                           reference=sessions.reference, pool=sessions.pool)

        def one(case) -> None:
            nonlocal ran
            t = time.monotonic()
            harness = new_harness()
            try:
                harness.run(case)
            except Exception as e:  # noqa: BLE001 - every case's outcome is counted
                record(case, e)
            with lock:
                ran += 1
                if args.verbose:
                    steps = ", ".join(f"{k} {v:.1f}" for k, v in harness.seconds.items())
                    print(f"case {ran}: {time.monotonic() - t:.1f} s ({steps})", flush=True)
                if ran % args.progress == 0:
                    elapsed = time.monotonic() - started
                    batches = "" if batcher is None else (
                        f", {totals['batched'] + batcher.batched} reads in {totals['batches'] + batcher.batches} "
                        f"batches, {totals['alone'] + batcher.alone} alone")
                    cpu = cpu_seconds() - cpu_started
                    n, t_last, cpu_last = ran - last["ran"], elapsed - last["elapsed"], cpu - last["cpu"]
                    last.update(ran=ran, elapsed=elapsed, cpu=cpu)
                    print(f"... {ran} cases, {diverged} diverged, {elapsed:.0f} s ({elapsed / ran:.2f} s, "
                          f"{cpu / ran:.2f} CPU-s each; the last {n}: {t_last / n:.2f} s, {cpu_last / n:.2f} CPU-s "
                          f"each{batches}), load {os.getloadavg()[0]:.1f}", flush=True)

        def loop() -> None:
            while True:
                with lock:
                    if not pending or expired():
                        return
                    i = pending.pop(0)
                try:
                    case = i if isinstance(i, Case) else draw(i)
                except Exception:  # noqa: BLE001 - not a case: said, and the thread goes on
                    print(f"DRAW FAILED for case {i}: {traceback.format_exc(limit=2)}", flush=True)
                    continue
                one(case)

        workers = [threading.Thread(target=loop) for _ in range(max(1, args.threads))]
        with short_retention(server.spark, server):  # the `retention` retries wait past it
            for t in workers:
                t.start()
            for t in workers:
                t.join()
        if batcher is not None:
            batcher.stop()
            totals.update(batched=batcher.batched, batches=batcher.batches, alone=batcher.alone)
        home = server.config.home
        server.stop()
        shutil.rmtree(home, ignore_errors=True)

    serve()

    elapsed, cpu = time.monotonic() - started, cpu_seconds() - cpu_started
    print(f"\n{ran} cases in {elapsed:.0f} s ({elapsed / max(ran, 1):.2f} s, {cpu / max(ran, 1):.2f} CPU-s each), "
          f"{diverged} diverged")
    if not args.no_batch:
        print(f"reads: {totals['batched']} in {totals['batches']} batched queries, {totals['alone']} alone")
    for stage, found in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        size, description, text = min(found, key=lambda f: f[0])
        print(f"\n== {stage}: {len(found)} case(s); smallest:\n{description}\n{text[:1500]}")
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
