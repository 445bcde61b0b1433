"""Every default of a ``tierlake.*`` setting that the prose of README.md and
docs/ states is the registry's (server/config/settings.py).

docs/configuration.md's tables are generated from the registry; the prose
elsewhere repeats some defaults ("`tierlake.gateway.max-statement-size`, 16 MiB
by default"), and those drifted (docs/ingest.md said 16 MiB for a 1 MiB
default). Each phrasing the docs use is matched; a new phrasing that names a
key next to the word "default" and matches none fails the test too, so that
no stated default escapes the comparison."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from tierlake.server.config import settings

KEY = r"`(?P<key>tierlake\.[a-z0-9.\-]+)`"
VALUE = r"(?P<value>`[^`]+`|\d[\d,]*(?:\.\d+)?(?: [A-Za-z]+)?|off|on|true|false)"
# How the docs say it: "`k` (default 10 s", "`k`, 16 MiB by default", "`k`, default `WARN`",
# "`k` (1 hour by default", "`k`, off by default", "`k` rows (default 100,000", "`k` (16 MiB)".
PHRASES = [
    re.compile(KEY + r"(?:\s+[a-z]+)?\s*[,(]\s*default:?\s+" + VALUE),
    re.compile(KEY + r"\s*[,(]\s*" + VALUE + r" by default"),
    re.compile(KEY + r",?\s*(?:which )?defaults? to\s+" + VALUE),
    re.compile(KEY + r"\s*\(\s*(?P<value>\d+ [KMG]iB)\)"),
]
# "`tierlake.gateway.auth=PLAIN` (default)"
ASSIGNED = re.compile(r"`(?P<key>tierlake\.[a-z0-9.\-]+)=(?P<value>[^`]+)`\s*\(default\)")
MENTION = re.compile(KEY + r"[^`.;]{0,40}\bdefault", re.IGNORECASE)
SIZES = {"bytes": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def docs():
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "configuration.md")]


def table_defaults(text: str) -> list[tuple[int, str, str]]:
    """(line, key, value as written) of the rows of Markdown tables with a "default" column: the
    first ``tierlake.*`` key of the row and the default cell's first value (before its notes)."""
    found, column = [], None
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("default") if "default" in cells else -1
            continue
        if column < 0 or set(line) <= set("|-: ") or column >= len(cells):
            continue
        key = re.search(KEY, " ".join(c for i, c in enumerate(cells) if i != column))
        value = re.match(VALUE, cells[column])
        if key and value:
            found.append((number, key.group("key"), value.group("value")))
    return found


def stated_defaults() -> list[tuple[str, int, str, str]]:
    """(file, line, key, value as written) of every default the prose and its tables state."""
    found = []
    for path in docs():
        text = path.read_text(encoding="utf-8")
        for phrase in (*PHRASES, ASSIGNED):
            for m in phrase.finditer(text):
                found.append((path.name, text.count("\n", 0, m.start()) + 1, m.group("key"), m.group("value")))
        found += [(path.name, line, key, value) for line, key, value in table_defaults(text)]
    return found


def value_of(setting: settings.Setting, written: str):
    text = written.strip("`").replace(",", "")
    size = re.fullmatch(r"(\d+) (bytes|KiB|MiB|GiB)", text)
    if size:
        return int(size.group(1)) * SIZES[size.group(2)]
    if text == "off" and setting.optional:
        return None
    return setting.parse(text)


def test_the_docs_state_some_defaults():
    assert len(stated_defaults()) >= 10  # the phrases still match what the docs write


@pytest.mark.parametrize(("where", "line", "key", "written"), stated_defaults(),
                         ids=lambda v: str(v) if not isinstance(v, int) else "")
def test_a_default_stated_in_the_docs_is_the_registrys(where, line, key, written):
    setting = settings.lookup(key)
    assert value_of(setting, written) == settings.parse_default(key), (
        f"{where}:{line} says {key} defaults to {written}; the registry's default is {setting.default!r}")


def test_every_mention_of_a_default_is_compared():
    compared = {(where, line) for where, line, _, _ in stated_defaults()}
    missed = []
    for path in docs():
        text = path.read_text(encoding="utf-8")
        for m in MENTION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            if (path.name, line) not in compared:
                missed.append(f"{path.name}:{line}: {m.group(0)!r}")
    assert not missed, "defaults stated in a way no phrase of this test reads (add one):\n" + "\n".join(missed)
