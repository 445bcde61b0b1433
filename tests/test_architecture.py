"""The dependency rules of the tree (docs/architecture.md), checked without a JVM.

The import graph is built from the source with ``ast``: every import counts,
including those inside functions, so neither a cycle nor a wrong-way import
can hide behind a function-level import (``if TYPE_CHECKING:`` blocks, which
never run, are left out). ``import_graph`` is shared by the rules below:

- no import cycles anywhere;
- procedures → server → sql: only the composition root imports ``procedures``
  (and ``udfs``), and ``sql`` imports nothing of ours;
- within ``server/``, a package imports only packages of lower layers
  (``SERVER_LAYERS``, the table of docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository root is the package ``tierlake``
ROOT_PACKAGE = "tierlake"
SOURCE_PACKAGES = ("server", "procedures", "udfs", "sql")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([ROOT_PACKAGE, *parts])


def source_modules() -> dict[str, Path]:
    """Every tierlake module under ``SOURCE_PACKAGES``: dotted name → file."""
    modules = {}
    for package in SOURCE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[module_name(path)] = path
    return modules


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The tierlake modules one import statement names (``from x import y``: ``x.y`` if a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        out.append(sub if sub in known else source)
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def import_graph() -> dict[str, set[str]]:
    """Module → the tierlake modules it imports, at any level of the file."""
    modules = source_modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for node in _runtime_nodes(tree):
            for target in _imported(node, name, path.name == "__init__.py", known):
                # ``import tierlake.server.kv.snapshots as kv`` → the deepest known module.
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def restrict(graph: dict[str, set[str]], prefixes: tuple[str, ...]) -> dict[str, set[str]]:
    """The subgraph of modules named by (or under) ``prefixes``."""

    def inside(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    return {m: {t for t in targets if inside(t)} for m, targets in graph.items() if inside(m)}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``a → b → … → a``) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(start: str) -> None:
        # Iterative Tarjan: the graph is small, but recursion depth is not ours to choose.
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & component):
            if child == start:
                return paths[node] + [start]
            if child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    return sorted(component)


def test_the_graph_sees_function_level_and_submodule_imports():
    graph = import_graph()
    assert "tierlake.server.changelog.lake_write" in graph
    # ``from tierlake import sql`` names the module ``tierlake.sql``.
    assert "tierlake.sql" in graph["tierlake.server.changelog.lake_write"]
    # start_workers imports the procedure client inside the function.
    assert "tierlake.server.clients.procedure_client" in graph["tierlake.server.tiering.worker"]
    # The composition root imports the procedures package (and the rule above must see it).
    assert "tierlake.procedures" in graph[COMPOSITION_ROOT]


def test_cycle_finder_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []




COMPOSITION_ROOT = "tierlake.server.app"
# Lowest first. A package may import packages of lower layers only; the
# modules directly under server/ (app, cli, config_docs) sit on top.
SERVER_LAYERS: list[set[str]] = [
    {"exceptions"},
    {"observability"},  # metrics are recorded from every layer; it imports nothing of the engine
    {"runtime"},
    {"sqlapi", "catalog"},
    {"clients", "changelog", "coordinator", "ingest"},
    {"kv", "quality"},
    {"tiering"},
    {"gateway"},
    {"app", "config_docs"},
    {"cli"},
]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _edges(rule) -> list[str]:
    return sorted(f"{module} imports {target}" for module, targets in import_graph().items()
                  for target in targets if rule(module, target))


def test_no_import_cycles_anywhere():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" → ".join(c) for c in found)


def test_only_the_composition_root_imports_procedures_and_udfs():
    offenders = _edges(lambda m, t: any(_within(t, f"tierlake.{p}") and not _within(m, f"tierlake.{p}")
                                        for p in ("procedures", "udfs")) and m != COMPOSITION_ROOT)
    assert not offenders, ("the engine must not import tierlake.procedures or tierlake.udfs "
                           "(only server/app.py registers them):\n  " + "\n  ".join(offenders))


def test_sql_imports_nothing_of_ours():
    offenders = _edges(lambda m, t: _within(m, "tierlake.sql") and not _within(t, "tierlake.sql"))
    assert not offenders, "tierlake.sql must not import the engine or the procedures:\n  " + "\n  ".join(offenders)


def _server_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["tierlake", "server"] and len(parts) > 2 else None


def test_every_server_package_has_a_layer():
    layered = set().union(*SERVER_LAYERS)
    packages = {_server_package(m) for m in import_graph()} - {None}
    assert packages <= layered, f"add these to SERVER_LAYERS and docs/architecture.md: {sorted(packages - layered)}"


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a server package to one of the same or a higher layer."""
    layer = {name: i for i, names in enumerate(SERVER_LAYERS) for name in names}
    out = []
    for module, targets in graph.items():
        for target in targets:
            a, b = _server_package(module), _server_package(target)
            if a is not None and b is not None and a != b and layer[b] >= layer[a]:
                out.append(f"{module} imports {target}")
    return sorted(out)


def test_server_packages_import_only_lower_layers():
    offenders = wrong_way(import_graph())
    assert not offenders, "server packages import upwards or sideways (docs/architecture.md):\n  " + \
        "\n  ".join(offenders)


def test_the_layer_rule_catches_upward_and_sideways_imports():
    assert wrong_way({"tierlake.server.runtime.session": {"tierlake.server.gateway.server"}})
    assert wrong_way({"tierlake.server.kv.leases": {"tierlake.server.quality.suite"}})
    assert not wrong_way({"tierlake.server.gateway.server": {"tierlake.server.runtime.session",
                                                            "tierlake.server.gateway.protocol"}})
