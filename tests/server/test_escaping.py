"""Everything a client sends is escaped where it is written (issue 51,
reproduction 3): one helper (server/escaping.py), used by the log formatter,
the round's last_error, the status page and metrics labels."""

from __future__ import annotations

import ast
import io
import logging
from pathlib import Path

import pytest

from tierlake.server.coordinator.state_machine import truncate_error
from tierlake.server.escaping import printable
from tierlake.server.observability import metrics
from tierlake.server.observability.status_page import _e
from tierlake.server.runtime.log_setup import OneLineFormatter

ROOT = Path(__file__).resolve().parents[2]
FORGED = ("x\n2026-11-28 00:00:00,000 INFO [main] tierlake.gateway: user rita granted admin"
          "\x1b[2J\u202eevil\u2028\x85\x7f")


@pytest.mark.parametrize("text,expected", [
    ("plain ünïcødé ✓ name", "plain ünïcødé ✓ name"),
    ("a\nb\rc\td", "a\\nb\\rc\\td"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("\u202eevil\u2066", "\\u202eevil\\u2066"),
    ("line\u2028sep\u2029para\x85nel\x7fdel", "line\\u2028sep\\u2029para\\x85nel\\x7fdel"),
    ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
    ("\U000e0041tag", "\\U000e0041tag"),
    (None, ""),
])
def test_printable(text, expected):
    assert printable(text) == expected


def _formatted(message, *args, exc=False) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("tierlake.test-escaping")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        if exc:
            try:
                raise ValueError(FORGED)
            except ValueError:
                logger.exception(message, *args)
        else:
            logger.warning(message, *args)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_a_client_name_cannot_forge_a_log_line():
    text = _formatted("denied %s to user %r", f"a write of default.`{FORGED}`", "rita")
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\n2026-11-28 00:00:00,000 INFO [main] tierlake.gateway: user rita granted admin\\x1b[2J\\u202eevil" in text


def test_a_traceback_keeps_its_lines_but_none_starts_a_record():
    text = _formatted("round failed: %s", FORGED, exc=True)
    lines = text.rstrip("\n").split("\n")
    assert len(lines) > 3  # the traceback's own lines are kept
    assert all(line.startswith("    ") for line in lines[1:]), lines
    assert "\x1b" not in text and "\u202e" not in text


def test_last_error_is_one_printable_line():
    error = truncate_error(f"bad _change_type {FORGED!s} in 3 rows" + "y" * 5000)
    assert error.isprintable() and len(error) == 2048 and error.endswith("…")
    assert error.startswith("bad _change_type x\\n2026-11-28")


def test_status_page_and_metrics_labels_escape_names():
    assert _e(FORGED) == _e(printable(FORGED)) and "\n" not in _e(FORGED)
    assert metrics.split_path(f"db.{FORGED}") == ("db", printable(FORGED))


def test_no_module_writes_logs_around_the_formatter():
    """Every log line goes through OneLineFormatter: no module of the server
    makes a handler, a formatter or a basicConfig of its own."""
    offenders = []
    for package in ("server", "procedures", "udfs", "sql"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "server" / "runtime" / "log_setup.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                    if name in {"basicConfig", "StreamHandler", "FileHandler", "RotatingFileHandler",
                                "setFormatter", "dictConfig", "fileConfig"}:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert offenders == []
