"""The authorisation policy (server/gateway/auth/policy.json) is well-formed, is what the gateway's
first line decides on, and every entry of it is documented (docs/security.md, "The policy, entry by
entry"): no JVM. That both lines agree on it is tests/security/test_policy_agreement.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tierlake.server.gateway.auth import planauth
from tierlake.server.sqlapi import roles as R

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = planauth.POLICY["entries"]
KINDS = {"function", "reflection", "regex", "statement", "relation", "setting"}
ROLES = {R.READER, R.WRITER, R.ADMIN, "nobody"}
DECIDED_BY = {"both", "parsed", "resolved"}
# What an example may name; tests/security/test_policy_agreement.py fills these in.
PLACEHOLDERS = {"name", "table", "db", "files", "catalog", "stream", "lake", "snapshot"}


def docs_section() -> str:
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    start = text.index("#### The policy, entry by entry")
    return text[start:text.index("\n### ", start)]


def covered(entry: dict) -> list[str]:
    """Everything an entry names that the docs must list: names, classes and (unless a reader's) nodes."""
    out = list(entry.get("names", [])) + list(entry.get("classes", [])) + list(entry.get("instance_of", []))
    out += entry.get("allowed_classes", [])
    if entry["role"] != R.READER:
        out += entry.get("nodes", [])
    return out


def test_the_policy_is_well_formed():
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)), ids
    assert planauth.POLICY["roles"] == [R.READER, R.WRITER, R.ADMIN]
    for entry in ENTRIES:
        where = entry.get("id")
        assert re.fullmatch(r"[a-z][a-z0-9-]*", where or ""), entry
        assert entry["kind"] in KINDS, where
        assert entry["role"] in ROLES, where
        assert entry["decided_by"] in DECIDED_BY, where
        assert entry["why"].strip(), where
        assert entry["examples"], f"{where}: no example statement (the agreement test runs them)"
        texts = list(entry.get("setup", []))
        for key in ("examples", "non_literal_examples"):
            examples = entry.get(key, [])
            if isinstance(examples, dict):
                assert set(examples) == set(entry["names"]), (where, key)
            texts += list(examples.values()) if isinstance(examples, dict) else list(examples)
        for text in texts:
            assert set(re.findall(r"\{([a-z_]+)\}", text)) <= PLACEHOLDERS, (where, text)
        for key in ("names", "classes", "instance_of", "nodes", "allowed_classes"):
            values = entry.get(key, [])
            assert isinstance(values, list) and all(isinstance(v, str) and v for v in values), (where, key)
            assert len(values) == len(set(values)), (where, key)
        for cls in entry.get("classes", []):
            assert re.fullmatch(r"\*?[A-Z][A-Za-z0-9]*\*?", cls), (where, cls)
        for cls in entry.get("instance_of", []) + entry.get("allowed_classes", []):
            assert re.fullmatch(r"[a-z][a-z0-9]*(\.[a-z][a-z0-9]*)*\.[A-Z][A-Za-z0-9]*", cls), (where, cls)
        # A line that decides must have the words its refusal says.
        if entry["decided_by"] != "parsed" and entry["role"] != R.READER:
            assert entry.get("resolved") or entry.get("resolved_note"), where
        if entry["kind"] == "function" and entry["role"] != R.READER and entry["decided_by"] != "resolved":
            assert "{name}" in entry["parsed"], where
    regex = planauth.policy_entry("regex-patterns")
    assert regex["non_literal_role"] in ROLES and regex["non_literal"] and regex["non_literal_examples"]
    assert planauth.policy_entry("reflection-classes")["allowed_classes"]


def test_the_first_line_decides_on_the_policy():
    entry = planauth.policy_entry
    assert planauth.FETCHING_FUNCTIONS == frozenset(entry("xml-functions")["names"])
    assert planauth.JVM_FUNCTIONS == frozenset(entry("jvm-reflection")["names"])
    assert planauth.TABLE_FUNCTIONS == frozenset(entry("table-functions")["names"])
    assert planauth.DATA_SOURCES == frozenset(entry("files-by-path")["names"])
    assert planauth.ICEBERG_METADATA_TABLES == frozenset(entry("iceberg-metadata-tables")["names"])
    assert planauth.READER_NODES == frozenset(entry("reader-statements")["nodes"])
    assert planauth.WRITE_NODES == frozenset(entry("writes")["nodes"]) == frozenset(entry("writes")["verbs"])
    assert planauth.FORBIDDEN_SETTINGS == frozenset(entry("forbidden-settings")["names"])
    assert planauth.SYS_DATABASE == entry("writes-into-sys")["database"]
    # The parse-side messages clients see come from the policy's words.
    assert planauth._function_requirement(["xpath_string"], frozenset()) == planauth.Requirement(
        None, "xpath_string (XML functions fetch what a document names)")
    assert planauth._function_requirement(["reflect"], frozenset({"reflect"})) == planauth.Requirement(
        R.ADMIN, "reflect (JVM reflection)")
    assert planauth._function_requirement(["refl"], frozenset()) == planauth.Requirement(
        R.ADMIN, "the function refl (not a built-in: persistent functions need admin)")
    assert planauth._function_requirement(["db", "xpath"], frozenset()).role is planauth.NOBODY


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_every_entry_is_documented(entry):
    section = docs_section()
    assert f"`{entry['id']}`" in section, f"docs/security.md does not list the policy entry {entry['id']}"
    missing = [item for item in covered(entry) if f"`{item}`" not in section]
    assert not missing, f"docs/security.md's policy table does not list {missing} of {entry['id']}"


def test_the_docs_list_no_entry_the_policy_lacks():
    listed = set(re.findall(r"^\| `([a-z][a-z0-9-]*)` \|", docs_section(), re.MULTILINE))
    assert listed == {e["id"] for e in ENTRIES}
