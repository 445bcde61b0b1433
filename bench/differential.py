"""The differential harness's long mode (issue 50 item 5): many generated cases against one server,
each compared with plain Spark SQL on plain Iceberg tables (tests/server/differential/harness.py),
counting divergences by class instead of stopping at the first.

Command:

    PYTHONPATH=. .venv/bin/python -m bench.differential --cases 200 --seed 1 [--minutes 10] [--examples-out f]

Prints one line per case that diverged (its stage and message) and, at the end, the number of cases
run, the number that diverged, and per divergence class the count and the smallest example seen (by
the size of its description). ``--minutes`` stops early; the count printed is what ran.

Each case is one database (its stream, lake, fresh view and the reference tables), dropped after it.
Cases run one after another on one server; ``--threads`` runs that many at once (each case's
statements are small, so two cores are mostly waiting on commits and round trips).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import threading
import time
import traceback

from hypothesis.control import BuildContext
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture.data import ConjectureData

from bench.common import start_server
from tests.server.differential.harness import Divergence, Harness
from tests.server.differential.strategies import EXPLICIT_CASES, Case, cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=0.0, help="stop after this long (0: no limit)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--explicit", action="store_true",
                        help="run the explicit cases (issue 50's reproductions) before the generated ones")
    parser.add_argument("--verbose", action="store_true", help="a line per case with its duration")
    parser.add_argument("--examples-out", help="write every divergence (class, message, case) as JSON lines")
    args = parser.parse_args(argv)

    print("starting the server", flush=True)
    server = start_server(**{"tierlake.tiering.workers": "0", "spark.ui.showConsoleProgress": "false"})
    print("server ready", flush=True)
    started = time.monotonic()
    deadline = started + args.minutes * 60 if args.minutes else None
    lock = threading.Lock()
    ran = diverged = 0
    classes: dict[str, list] = collections.defaultdict(list)
    out = open(args.examples_out, "a") if args.examples_out else None

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

    def one(case) -> None:
        nonlocal ran
        t = time.monotonic()
        harness = Harness(server)
        try:
            harness.run(case)
        except Exception as e:  # noqa: BLE001 - every case's outcome is counted
            record(case, e)
        with lock:
            ran += 1
            if args.verbose:
                steps = ", ".join(f"{k} {v:.1f}" for k, v in harness.seconds.items())
                print(f"case {ran}: {time.monotonic() - t:.1f} s ({steps})", flush=True)
            if ran % 10 == 0:
                print(f"... {ran} cases, {diverged} diverged, {time.monotonic() - started:.0f} s", flush=True)

    # Each case drawn on its own from the same strategy as the default suite, from its own seed
    # (Hypothesis's generate phase mutates earlier examples, so its consecutive cases look alike);
    # never shrunk: the long mode counts, the default suite shrinks.
    def draw(i: int):
        for attempt in range(100):  # a draw a filter rejects is drawn again from the next seed
            data = ConjectureData(random=random.Random((args.seed * 1_000_003 + i) * 101 + attempt))
            try:
                with BuildContext(data, is_final=False, wrapped_test=None):
                    return data.draw(cases())
            except StopTest:
                continue
        raise RuntimeError(f"case {i}: no valid draw in 100 attempts")

    pending: list = (list(EXPLICIT_CASES) if args.explicit else []) + list(range(args.cases))
    workers = []

    def loop() -> None:
        while True:
            with lock:
                if not pending or (deadline and time.monotonic() > deadline):
                    return
                i = pending.pop(0)
            one(i if isinstance(i, Case) else draw(i))

    for _ in range(max(1, args.threads)):
        t = threading.Thread(target=loop)
        t.start()
        workers.append(t)
    for t in workers:
        t.join()
    elapsed = time.monotonic() - started
    print(f"\n{ran} cases in {elapsed:.0f} s ({elapsed / max(ran, 1):.2f} s each), {diverged} diverged")
    for stage, found in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        size, description, text = min(found, key=lambda f: f[0])
        print(f"\n== {stage}: {len(found)} case(s); smallest:\n{description}\n{text[:1500]}")
    if out:
        out.close()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
