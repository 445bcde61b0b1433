"""Every registered procedure, setting and error class is documented, and every reference to the
design (docs/design.md) resolves inside the repository."""

import re
from pathlib import Path

from tierlake.procedures import load_builtins
from tierlake.server import exceptions
from tierlake.server.config.config import DEFAULTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_procedure_has_a_section_in_docs():
    text = (DOCS / "procedures.md").read_text()
    documented = set(re.findall(r"^## (sys\.\w+)", text, re.M))
    registered = {p.qualified_name for p in load_builtins()}
    missing = registered - documented
    assert not missing, f"undocumented procedures: {sorted(missing)}"


def test_every_sys_view_is_documented():
    from tierlake import sql

    text = (DOCS / "procedures.md").read_text()
    for path in sql.files("views"):
        assert f"## sys.{path.stem}" in text, path.stem


def test_every_tierlake_setting_is_documented():
    text = (DOCS / "configuration.md").read_text()
    for key in DEFAULTS:
        assert f"`{key}`" in text, key


def test_every_error_class_is_documented():
    text = (DOCS / "errors.md").read_text()
    for name in dir(exceptions):
        obj = getattr(exceptions, name)
        if isinstance(obj, type) and issubclass(obj, exceptions.TierlakeError) and obj is not exceptions.TierlakeError:
            assert f"`{name}`" in text, name


def test_every_sql_function_has_a_section_in_docs():
    from tierlake.udfs import load_builtins as load_functions

    text = (DOCS / "functions.md").read_text()
    documented = set(re.findall(r"^## (\w+)", text, re.M))
    for udf in load_functions():
        assert udf.name in documented, f"undocumented SQL function: {udf.name}"
        # The documented signature is the registered one.
        assert f"`{udf.signature()}`" in text, udf.signature()


# ---- docs/design.md: every design reference resolves inside the repository ----

REPO = DOCS.parent
DESIGN = DOCS / "design.md"
TEXT_SUFFIXES = {".py", ".md", ".sql", ".j2", ".cfg", ".toml", ".java", ".txt", ".sh", ".ini", ".yml", ".yaml",
                 ".html", ".js", ".css", ".json"}
SKIP_DIRS = {".git", "build", "dist", "node_modules", "__pycache__"}
# A citation: ``docs/design.md, 'Heading'`` (or with double quotes), on one line.
CITATION = re.compile(r"docs/design\.md,\s*['\"]([^'\"\n]+)['\"]")
WRAPPED_CITATION = re.compile(r"docs/design\.md,[ \t]*$", re.M)
# The numbered design document design.md replaced (outside the repository).
OLD_DESIGN = re.compile(r"\bDESIGN(?:\.md)?\b(?:\s*§\s*(\d+))?")
# Applied migrations keep their text: their checksums are recorded in sys.schema_version, and an
# edit would make every existing home log that the migration changed. Their "DESIGN §N" resolves
# through design.md's table of former section numbers.
FROZEN = ("sql/schema/",)
# Files another change owns right now (issue 41, part 5 left them); each still cites the old
# document. Drop an entry when its file cites docs/design.md instead (the test says when).
PENDING: dict[str, str] = {}


def design_headings() -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{2,4} (.+)$", DESIGN.read_text(), re.M)}


def former_sections() -> dict[str, str]:
    """design.md's table of the old document's section numbers: "§N" → heading."""
    text = DESIGN.read_text().split("## Former section numbers", 1)[1]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (\d+) \| '([^']+)' \|$", text, re.M)}


def repository_text_files():
    for path in sorted(REPO.rglob("*")):
        rel = path.relative_to(REPO)
        if (rel.parts[0].startswith(".venv") or rel.parts[0].endswith(".egg-info")
                or any(part in SKIP_DIRS or part.startswith(".") and part != "." for part in rel.parts[:-1])):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name.endswith(".sql.j2")):
            yield rel.as_posix(), path.read_text(encoding="utf-8", errors="replace")


def design_reference_problems() -> list[str]:
    headings, former = design_headings(), former_sections()
    problems = []
    for rel, text in repository_text_files():
        if rel in ("docs/design.md", "tests/test_docs.py"):  # the document, and the rule's own examples
            continue
        line = lambda pos, text=text: text.count("\n", 0, pos) + 1  # noqa: E731
        for m in CITATION.finditer(text):
            if m.group(1) not in headings:
                problems.append(f"{rel}:{line(m.start())}: docs/design.md has no section {m.group(1)!r}")
        for m in WRAPPED_CITATION.finditer(text):
            problems.append(f"{rel}:{line(m.start())}: put a docs/design.md citation's heading on its line")
        for m in OLD_DESIGN.finditer(text):
            allowed = rel in PENDING or (rel.startswith(FROZEN) and m.group(1) is not None)
            if not allowed:
                problems.append(f"{rel}:{line(m.start())}: {m.group(0)!r} points outside the repository; "
                                "cite docs/design.md, '<section>'")
            elif m.group(1) is not None and m.group(1) not in former:
                problems.append(f"{rel}:{line(m.start())}: {m.group(0)!r} is not in design.md's former numbers")
    return problems


def test_design_references_resolve_inside_the_repository():
    problems = design_reference_problems()
    assert not problems, "\n".join(problems)


def test_design_md_former_numbers_name_its_sections():
    former = former_sections()
    assert sorted(former, key=int) == [str(n) for n in range(1, 17)]
    assert set(former.values()) <= design_headings(), set(former.values()) - design_headings()


def test_pending_design_references_are_still_pending():
    texts = dict(repository_text_files())
    stale = [rel for rel in PENDING if not OLD_DESIGN.search(texts.get(rel, ""))]
    assert not stale, f"these cite docs/design.md now: remove them from PENDING: {stale}"
    for replacement in PENDING.values():
        assert set(CITATION.findall(replacement)) <= design_headings(), replacement


def test_the_design_reference_check_catches_bad_references(tmp_path, monkeypatch):
    assert CITATION.findall("see docs/design.md, 'Leases' and docs/design.md, \"Nope\"") == ["Leases", "Nope"]
    assert OLD_DESIGN.search("(DESIGN §4)").group(1) == "4"
    assert OLD_DESIGN.search("See DESIGN.md §2 for").group(1) == "2"
    assert OLD_DESIGN.search("`../shared/DESIGN.md` — the architecture").group(1) is None
    assert WRAPPED_CITATION.search("# as docs/design.md,\n# 'Leases' says")
