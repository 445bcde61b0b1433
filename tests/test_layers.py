"""The dependency rule of DESIGN §3: procedures → server → sql.

Checked on the source with ``ast`` (every import statement, including those
inside functions), so no JVM and no import side effects are involved.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "tierlake"
# Folders of the repository that are subpackages of tierlake (setup.cfg).
SOURCE_DIRS = ("procedures", "server", "sql", "udfs")
COMPOSITION_ROOT = "tierlake.server.app"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _is_module(name: str) -> bool:
    if not name.startswith(PACKAGE + "."):
        return False
    path = ROOT.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import in ``path``; relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from tierlake import procedures` imports the module tierlake.procedures.
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names
                      if _is_module(f"{target}.{alias.name}")]
    return found


def _all_imports() -> list[tuple[str, str, int, str]]:
    rows = []
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = _module_name(path)
            rows += [(module, str(path.relative_to(ROOT)), line, target) for line, target in _imports(path, module)]
    return rows


def _within(target: str, package: str) -> bool:
    return target == package or target.startswith(package + ".")


def _offenders(rule) -> list[str]:
    return sorted({f"{where}:{line} {module} imports {target}"
                   for module, where, line, target in _all_imports() if rule(module, target)})


def test_only_the_composition_root_imports_procedures():
    offenders = _offenders(lambda module, target: _within(target, "tierlake.procedures")
                           and not _within(module, "tierlake.procedures") and module != COMPOSITION_ROOT)
    assert not offenders, ("the engine must not import tierlake.procedures (only server/app.py registers them):\n  "
                           + "\n  ".join(offenders))


def test_sql_imports_nothing_from_server_or_procedures():
    offenders = _offenders(lambda module, target: _within(module, "tierlake.sql") and (
        _within(target, "tierlake.server") or _within(target, "tierlake.procedures")))
    assert not offenders, "tierlake.sql must not import the engine or the procedures:\n  " + "\n  ".join(offenders)


def test_the_walk_sees_function_level_imports():
    # The rule is only as good as the walk: a function-level import must be found.
    rows = _all_imports()
    assert any(m == "tierlake.server.app" and t == "tierlake.server.tiering.worker" for m, _, _, t in rows)
    assert any(m == "tierlake.sql" and t == "tierlake.sql.values" for m, _, _, t in rows)
