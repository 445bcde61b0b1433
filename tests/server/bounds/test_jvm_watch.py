"""One life (issue 51, reproduction 6): when the Spark JVM goes, the server
process exits non-zero with one clear log line instead of answering "Cannot
call methods on a stopped SparkContext" for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from tests.conftest import free_port, start_server_process, stop_process
from tierlake.server.bounds import jvm_watch


def _java_child(pid: int) -> int:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    for child in children:
        with open(f"/proc/{child}/cmdline", "rb") as f:
            if b"java" in f.read().split(b"\0")[0]:
                return int(child)
    raise AssertionError(f"no java child of {pid}: {children}")


@pytest.mark.integration
def test_the_server_exits_non_zero_when_its_jvm_dies(tmp_path):
    home, port = tmp_path / "home", free_port()
    server = start_server_process(home, port, [])
    try:
        os.kill(_java_child(server.pid), signal.SIGKILL)
        status = server.wait(timeout=120)
    finally:
        stop_process(server)
    assert status == jvm_watch.EXIT_JVM_DIED
    log = (home / "logs" / "tierlake.log").read_text(encoding="utf-8")
    line = next(line for line in log.splitlines() if "the Spark JVM" in line)
    assert "exited with code -9 while the server was running: the server exits with code 3" in line, line


def test_an_orderly_stop_is_not_a_death(monkeypatch):
    class Proc:
        pid = 1234

        def __init__(self):
            self.ended = threading.Event()

        def wait(self):
            self.ended.wait()
            return 0

    proc, exits, stopping = Proc(), [], threading.Event()
    monkeypatch.setattr(jvm_watch, "jvm_process", lambda: proc)
    thread = jvm_watch.watch(stopping, exits.append)
    stopping.set()
    proc.ended.set()
    thread.join(5)
    assert exits == []
    proc2, stopping2 = Proc(), threading.Event()
    monkeypatch.setattr(jvm_watch, "jvm_process", lambda: proc2)
    thread = jvm_watch.watch(stopping2, exits.append)
    proc2.ended.set()
    thread.join(5)
    assert exits == [jvm_watch.EXIT_JVM_DIED]
