"""Runs the attack corpus (tests/fixtures/security/attack_corpus.jsonl)
through a gateway with a password file, as one user, and reports every
entry that was not refused (or, for ``literal`` entries, not returned
unsubstituted). Side effects are checked by the caller."""

from __future__ import annotations

import json
from pathlib import Path

from pyhive import exc, hive

CORPUS = Path(__file__).parents[1] / "fixtures" / "security" / "attack_corpus.jsonl"
REFUSED = ("42501", "42601")  # permission denied, or Spark's parse error


def load(**placeholders: str) -> list[dict]:
    entries = []
    for line in CORPUS.read_text().splitlines():
        entry = json.loads(line)
        for key in ("sql", "value"):
            if key in entry:
                for name, value in placeholders.items():
                    entry[key] = entry[key].replace("{" + name + "}", value)
        entry["setup"] = [s.replace("{db}", placeholders["db"]) for s in entry.get("setup", [])]
        entries.append(entry)
    return entries


def run(port: int, user: str, password: str, entries: list[dict]) -> list[str]:
    """The entries the gateway did not refuse, described."""
    failures = []
    with hive.connect("127.0.0.1", port, username=user, password=password, auth="CUSTOM") as conn:
        cursor = conn.cursor()
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
        for key in ("spark.sql.catalog.evil", "spark.sql.p", "spark.sql.extensions"):
            cursor.execute(f"SET {key}")
            value = cursor.fetchall()
            if key != "spark.sql.extensions" and value != [(key, "<undefined>")]:
                failures.append(f"{user}: {key} is now {value}")
            if key == "spark.sql.extensions" and "Evil" in str(value):
                failures.append(f"{user}: {key} is now {value}")
        cursor.execute("SET spark.sql.variable.substitute")
        if cursor.fetchall() != [("spark.sql.variable.substitute", "false")]:
            failures.append(f"{user}: variable substitution was turned on")
    return failures
