"""The CLI's long operations (starting the server or a tiering service) show their elapsed time on a terminal
and leave nothing behind; piped, they print nothing (the ready line stays the first line a script reads)."""

from __future__ import annotations

import io
import threading

from tests.conftest import wait_for
from tierlake.server.cli import _progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_counts_seconds_and_clears_its_line():
    out = Terminal()
    with _progress(out, "tierlake: starting"):
        # The operation lasts until the display has counted two seconds.
        wait_for(lambda: "starting… 2 s" in out.getvalue(), 60, "the second tick", every=0.05)
    text = out.getvalue()
    assert text.startswith("\rtierlake: starting… 1 s\rtierlake: starting… 2 s")
    assert text.endswith("\r" + " " * (len("tierlake: starting") + 12) + "\r")


def test_progress_prints_nothing_when_not_on_a_terminal():
    out = io.StringIO()
    with _progress(out, "tierlake: starting"):
        threading.Event().wait(1.2)
    assert out.getvalue() == ""
