"""The first hour, as written: README.md's set-up and tour, then the quick
examples of docs/tiering.md, docs/procedures.md and docs/clients.md, run in
order against a fresh server started by the README's own command, each
block exactly as written. A block that fails fails the test, naming it.

How each kind of block runs:

- ``bash``: with ``bash -e`` in a fresh working directory whose ``.venv`` is
  this checkout's virtualenv (the one ``.ci/run`` just built with the
  README's install command, which is checked to be the same). The README's
  set-up line installs and then starts the server: its install part is what
  ``.ci/run`` ran; its last command (``.venv/bin/tierlake server``) is run as
  written and must print the ready line the README quotes. The README's test
  command is not run (it is this suite): it must be what ``.ci/run`` runs.
- a beeline transcript (a command, then ``0: jdbc:…> statement`` lines): the
  command with those statements on its standard input;
- ``python``: the virtualenv's Python, in the working directory;
- ``sql``: statement by statement (``;``-separated) on one PyHive session;
  ``-- a few seconds later`` waits until the lake has the rows.

A block preceded by ``<!-- tour: skip: <why> -->`` is not run (templates
with placeholders, other deployments); the reason is required and printed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyhive import hive

from tests.conftest import subprocess_env
from tierlake.server.clients.statements import StatementBuffer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/tiering.md", "docs/procedures.md", "docs/clients.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!-- tour: skip: (.+?) -->\s*$")
READY = "tierlake ready: jdbc:hive2://127.0.0.1:10000/default"
LATER = "-- a few seconds later"


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    text: str
    skip: str | None

    def __str__(self) -> str:
        return f"{self.doc}:{self.line} ({self.lang or 'text'})"


def blocks(doc: str) -> list[Block]:
    text = (ROOT / doc).read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        out.append(Block(doc, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2),
                         skip.group(1) if skip else None))
    return out


def test_every_block_is_run_or_says_why_not():
    for doc in DOCS:
        for block in blocks(doc):
            if block.lang in ("", "text"):
                continue  # output shown to the reader, not something to run
            assert block.lang in ("bash", "python", "sql", "java") or block.skip, f"{block}: unknown kind"
            if block.lang == "java":
                assert block.skip, f"{block}: a Java fragment needs a skip reason"


def readme_commands() -> tuple[str, str]:
    setup, tests = [b.text.strip() for b in blocks("README.md") if b.lang == "bash"][:2]
    return setup, tests


def test_the_readme_test_command_is_what_ci_runs():
    _, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests.replace("pip install -q", "pip install") in ci.replace("pip install -q", "pip install"), \
        f"README's test command is not .ci/run's:\n{tests}\n---\n{ci}"


class Tour:
    def __init__(self, work: Path):
        self.work = work
        self.env = subprocess_env(HOME=str(work))
        for name in ("TIERLAKE_URL", "TIERLAKE_HOME"):  # the README's defaults, not the suite's
            self.env.pop(name, None)

    def bash(self, block: Block, script: str, stdin: str | None = None, timeout: float = 300) -> str:
        r = subprocess.run(["bash", "-e", "-c", script], cwd=self.work, env=self.env, input=stdin,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"{block} failed ({r.returncode}):\n{script}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    def python(self, block: Block) -> str:
        r = subprocess.run([str(self.work / ".venv" / "bin" / "python"), "-"], cwd=self.work, env=self.env,
                           input=block.text, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{block} failed:\n{block.text}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    def sql(self, block: Block) -> list:
        buffer = StatementBuffer()
        pieces: list[tuple[bool, str]] = []  # (wait for the lake first, statement)
        wait = False
        for line in block.text.splitlines():
            if line.strip().startswith(LATER):
                wait = True
            for statement in buffer.feed(line):
                pieces.append((wait, statement))
                wait = False
        if buffer.rest():
            pieces.append((wait, buffer.rest()))
        results = []
        with hive.connect("127.0.0.1", 10000, username="me") as conn:
            cursor = conn.cursor()
            for wait, statement in pieces:
                if wait:
                    self.wait_for_lake(cursor)
                try:
                    cursor.execute(statement)
                except Exception as e:  # noqa: BLE001 - reported with the block and the statement
                    pytest.fail(f"{block} failed at:\n{statement}\n{e}")
                # DDL answers a bare "Result" column with no rows to fetch.
                described = cursor.description and [d[0] for d in cursor.description] != ["Result"]
                results.append(cursor.fetchall() if described else None)
        return results

    @staticmethod
    def wait_for_lake(cursor, timeout: float = 120.0) -> None:
        """Until a round tiered everything written: the lake equals the fresh view (lake + pending)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cursor.execute("SELECT * FROM shop_lake.orders")
            lake = sorted(map(tuple, cursor.fetchall()))
            cursor.execute("SELECT * FROM shop_fresh.orders")
            if lake and lake == sorted(map(tuple, cursor.fetchall())):
                return
            time.sleep(1)
        raise AssertionError("the lake never got the rows the tour wrote")


def start_server(tour: Tour, block: Block) -> subprocess.Popen:
    setup, _ = readme_commands()
    *install, start = [part.strip() for part in setup.split("&&")]
    ci = (ROOT / ".ci" / "run").read_text().replace("pip install -q", "pip install")
    assert " && ".join(install) in ci, f"README's install is not what .ci/run installs with:\n{setup}"
    assert start == ".venv/bin/tierlake server", start
    proc = subprocess.Popen(["bash", "-c", "exec " + start], cwd=tour.work, env=tour.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    # Development mode adds the status page's free port: "… (status page: http://127.0.0.1:N/)".
    if line != READY and not re.fullmatch(re.escape(READY) + r" \(status page: http://127\.0\.0\.1:\d+/\)", line):
        proc.kill()
        pytest.fail(f"{block}: the server printed {line!r}, not {READY!r}:\n{proc.stderr.read()[-3000:]}")
    return proc


def test_the_readme_and_the_docs_run_as_written(tmp_path):
    work = tmp_path / "tour"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix))
    tour = Tour(work)
    all_blocks = [b for doc in DOCS for b in blocks(doc)]
    setup = next(b for b in all_blocks if b.lang == "bash")
    server = start_server(tour, setup)
    ran, skipped = [], []
    try:
        for block in all_blocks:
            if block.lang in ("", "text") or block is setup or "pytest" in block.text:
                continue
            if block.skip:
                skipped.append(f"{block}: {block.skip}")
                continue
            if block.lang == "bash" and "BeeLine" in block.text:
                command, statements = beeline(block.text)
                out = tour.bash(block, command, stdin="\n".join(statements) + "\n!quit\n")
                assert "lake_tiering_status" in out or "version" in out, out[-2000:]
            elif block.lang == "bash":
                tour.bash(block, block.text)
            elif block.lang == "python":
                tour.python(block)
            elif block.lang == "sql":
                results = tour.sql(block)
                check(block, results)
            ran.append(str(block))
    finally:
        server.terminate()
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
    print("ran:", *ran, "skipped:", *skipped, sep="\n  ")
    assert len(ran) >= 20, ran


def beeline(text: str) -> tuple[str, list[str]]:
    """The command of a beeline transcript (continuation lines joined) and the statements typed at its prompt."""
    lines = text.splitlines()
    command = []
    while lines and not lines[0].startswith("0: "):
        command.append(lines.pop(0))
    statements = [line.split("> ", 1)[1] for line in lines if line.startswith("0: ")]
    return "\n".join(command), statements


def check(block: Block, results: list) -> None:
    """What the README's tour says the reader sees."""
    if block.doc == "README.md":
        lake = results[4]  # SELECT * FROM shop_lake.orders, after "a few seconds later"
        assert [(r[0], r[1], r[2]) for r in lake] == [(1, 9.5, "paid")], lake
        status = results[5]  # SELECT * FROM sys.lake_tiering_status
        assert any("orders" in r for r in status), status
