"""``tierlake sql`` without statements: an interactive session, driven through
a pseudo-terminal as a user types (line editing and history from readline)."""

from __future__ import annotations

import os
import pty
import select
import signal
import time

import pytest

from tests.conftest import subprocess_env, tierlake_command

pytestmark = pytest.mark.integration


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str]):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the CLI on the terminal's slave side
            os.execvpe(argv[0], argv, env)
        self.seen = ""

    def expect(self, text: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {text!r}; the terminal shows:\n{self.seen[-2000:]}"
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    assert text in self.seen, f"the session ended without {text!r}:\n{self.seen[-2000:]}"
                self.seen += chunk.decode(errors="replace")
        at = self.seen.index(text) + len(text)
        before, self.seen = self.seen[:at], self.seen[at:]
        return before

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                os.read(self.fd, 4096)
            except OSError:
                time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("the session did not end")


def test_an_interactive_session_in_a_terminal(server, tmp_path):
    url = f"jdbc:hive2://127.0.0.1:{server.gateway.port}/default"
    term = Terminal(tierlake_command() + ["sql", "--url", url, "--user", "me"],
                    subprocess_env(HOME=str(tmp_path), TERM="dumb"))
    term.expect("tierlake> ")
    # A statement over two lines, with a ';' inside a literal.
    term.type("SELECT 1 AS one,\r")
    term.expect("-> ")
    term.type("'a;b' AS s;\r")
    shown = term.expect("(1 row)")
    assert "| one | s   |" in shown and "| 1   | a;b |" in shown, shown
    term.expect("tierlake> ")
    # An error is shown with its SQLSTATE and the session goes on.
    term.type("CALL sys.nope();\r")
    assert "unknown procedure sys.nope" in term.expect("tierlake> ")
    # History: the up arrow brings back the last line, edited with the cursor keys.
    term.type("SELECT 41 AS answer;\r")
    assert "| 41     |" in term.expect("tierlake> ")
    term.type("\x1b[A")  # up: SELECT 41 AS answer;
    term.type("\x1b[D" * len(" AS answer;") + "\x7f" + "2\r")  # left to the 1, delete it, type 2
    assert "| 42     |" in term.expect("tierlake> ")
    term.type("\\q\r")
    assert term.wait() == 0
    history = (tmp_path / ".tierlake_sql_history").read_text()
    assert "SELECT 41 AS answer;" in history and "SELECT 42 AS answer;" in history
