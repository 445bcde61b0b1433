"""Runs the attack corpus (tests/fixtures/security/attack_corpus.jsonl)
through a gateway with a password file, as one user, and reports every
entry that was not refused (or, for ``literal`` entries, not returned
unsubstituted) and every side effect an entry left behind.

An entry's ``effect`` names what it would change if it ran, each checked
right after the entry (and the settings once more at the end):

- ``file``: a path under the test's directory that must not exist;
- ``table``: the canary table (``{db}.<name>``) still holds exactly one row, ``'alive'``;
- ``no_table``: a table ``{db}.<name>`` that must not exist;
- ``setting``: a session setting whose value must be what it was before the corpus ran;
- ``rows``: a ``sys`` table whose row count must be what it was before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyhive import exc, hive

from tierlake.server.gateway.auth.callparse import _skip_blank  # Spark's rules for leading comments

CORPUS = Path(__file__).parents[1] / "fixtures" / "security" / "attack_corpus.jsonl"
REFUSED = ("42501", "42601", "54001")  # permission denied, Spark's parse error, or too complex to parse
EFFECTS = frozenset({"file", "table", "no_table", "setting", "rows"})


def load(**placeholders: str) -> list[dict]:
    entries = []
    for line in CORPUS.read_text().splitlines():
        entry = json.loads(line)
        for key in ("sql", "value"):
            if key in entry:
                for name, value in placeholders.items():
                    entry[key] = entry[key].replace("{" + name + "}", value)
        entry["setup"] = [s.replace("{db}", placeholders["db"]) for s in entry.get("setup", [])]
        entry["effect"] = entry.get("effect", {})
        unknown = set(entry["effect"]) - EFFECTS
        if unknown:
            raise ValueError(f"unknown effect {sorted(unknown)} in {line}")
        head = entry["sql"][max(0, _skip_blank(entry["sql"], 0, len(entry["sql"]))):][:6].lower()
        is_set = head.startswith("reset") or (head.startswith("set") and head[3:4] in (" ", "`", "\t", "\n"))
        if is_set and "setting" not in entry["effect"]:
            raise ValueError(f"a SET or RESET without the setting it would change: {line}")
        entries.append(entry)
    return entries


def settings_of(entries: list[dict]) -> list[str]:
    """Every setting key the corpus tries to change."""
    return sorted({e["effect"]["setting"] for e in entries if "setting" in e["effect"]})


class Effects:
    """The state the corpus must leave as it found it, read through the
    driver's session (``spark``): files under ``tmp``, the canary database
    ``db``, the row counts of the sys tables the corpus writes."""

    def __init__(self, spark: Any, tmp: Path, db: str, entries: list[dict]):
        self.spark, self.tmp, self.db = spark, tmp, db
        self.counts = {name: self._count(name) for name in {e["effect"]["rows"] for e in entries
                                                           if "rows" in e["effect"]}}

    def _count(self, table: str) -> int:
        return self.spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]

    def left_by(self, entry: dict) -> list[str]:
        """The side effects of ``entry`` found (settings are the session's: see :func:`run`)."""
        found = []
        effect = entry["effect"]
        if "file" in effect and (self.tmp / effect["file"]).exists():
            found.append(f"{effect['file']} was created")
        if "table" in effect:
            try:
                rows = [tuple(r) for r in self.spark.sql(f"SELECT id FROM {self.db}.{effect['table']}").collect()]
            except Exception as error:  # noqa: BLE001 - a dropped table is the finding
                rows = [f"unreadable: {str(error)[:120]}"]
            if rows != [("alive",)]:
                found.append(f"{effect['table']} now holds {rows!r}")
        if "no_table" in effect and self.spark.catalog.tableExists(f"{self.db}.{effect['no_table']}"):
            found.append(f"{self.db}.{effect['no_table']} was created")
        if "rows" in effect:
            try:
                count = self._count(effect["rows"])
            except Exception as error:  # noqa: BLE001 - a dropped sys table is the finding
                count = f"unreadable: {str(error)[:120]}"
            if count != self.counts[effect["rows"]]:
                found.append(f"{effect['rows']} has {count} rows, had {self.counts[effect['rows']]}")
        return found


def _setting(cursor, key: str):
    cursor.execute(f"SET {key}")
    return cursor.fetchall()


def run(port: int, user: str, password: str, entries: list[dict], effects: Effects) -> list[str]:
    """The entries the gateway did not refuse, and the side effects left, described."""
    failures = []
    with hive.connect("127.0.0.1", port, username=user, password=password, auth="CUSTOM") as conn:
        cursor = conn.cursor()
        keys = settings_of(entries)
        before = {key: _setting(cursor, key) for key in keys}
        for entry in entries:
            for setup in entry["setup"]:
                cursor.execute(setup)
            try:
                cursor.execute(entry["sql"])
                rows = cursor.fetchall() if cursor.description else []
            except exc.OperationalError as error:
                status = error.args[0].status
                if entry["expect"] != "deny" or status.sqlState not in REFUSED:
                    failures.append(f"{user}: {entry['sql']!r} failed with {status.sqlState}: "
                                    f"{status.errorMessage[:200]}")
            else:
                if entry["expect"] == "deny":
                    failures.append(f"{user}: {entry['sql']!r} was allowed")
                elif rows != [(entry["value"],)]:
                    failures.append(f"{user}: {entry['sql']!r} returned {rows!r}")
            finally:
                if entry["setup"]:
                    cursor.execute("USE default")
            failures += [f"{user}: {entry['sql']!r}: {found}" for found in effects.left_by(entry)]
            key = entry["effect"].get("setting")
            if key is not None and _setting(cursor, key) != before[key]:
                failures.append(f"{user}: {entry['sql']!r}: {key} is now {_setting(cursor, key)}, "
                                f"was {before[key]}")
        for key in keys:
            if _setting(cursor, key) != before[key]:
                failures.append(f"{user}: {key} is now {_setting(cursor, key)}, was {before[key]}")
        if before.get("spark.sql.variable.substitute") != [("spark.sql.variable.substitute", "false")]:
            failures.append(f"{user}: variable substitution was on: {before.get('spark.sql.variable.substitute')}")
    return failures
