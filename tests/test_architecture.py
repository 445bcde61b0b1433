"""The dependency rules of the tree (docs/architecture.md), checked without a JVM.

The import graph is built from the source with ``ast``: every import counts,
those inside functions and those under ``if TYPE_CHECKING:`` included, so
neither a cycle nor a wrong-way import can hide behind either (an annotation
that names an upper layer is a dependency on it, whether or not it runs).
``import_graph`` is shared by the rules below:

- no import cycles anywhere;
- procedures → server → sql: only the composition root imports ``procedures``
  (and ``udfs``), and ``sql`` imports nothing of ours;
- within ``server/``, a package imports only packages of lower layers
  (``SERVER_LAYERS``, the table of docs/architecture.md);
- a function-level import of one of our own modules (``tierlake``,
  ``tierlake_client``) says why it is not at module level, with a comment
  ``# import here: <reason>`` on its line or on the line above it (or above
  the run of imports it belongs to).
"""

from __future__ import annotations

import ast
import re
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


def import_graph() -> dict[str, set[str]]:
    """Module → the tierlake modules it imports, at any level of the file."""
    modules = source_modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for node in ast.walk(tree):
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
    # cli.py imports the composition root inside a function (and says why).
    assert COMPOSITION_ROOT in graph["tierlake.server.cli"]
    # ``if TYPE_CHECKING:`` imports count: registration's Context is one.
    assert "tierlake.server.sqlapi.context" in graph["tierlake.server.coordinator.registration"]
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
    {"exceptions", "escaping"},  # escaping: client text made printable for logs, status, labels
    {"config", "observability"},  # settings, values, durations, Config; metrics (recorded from every layer)
    {"runtime"},
    {"metastore", "bounds"},  # the metastore and tierlake's code in it; what a statement may cost, one life
    {"state"},  # the sys-state store: state tables, versions, migrations, housekeeping
    {"sqlapi", "catalog"},
    {"clients", "changelog", "coordinator", "ingest"},
    {"kv", "quality"},
    {"maintenance"},  # table maintenance: lake and stream tables after a round, periodic KV maintenance
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


def test_no_old_import_path_is_kept():
    """Modules that only re-export another under an old name (``sys.modules[__name__] = …``) are gone:
    one path per module (issue 52)."""
    aliases = sorted(name for name, path in source_modules().items() if "sys.modules[__name__]" in path.read_text())
    assert not aliases, aliases


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
    assert wrong_way({"tierlake.server.runtime.session": {"tierlake.server.gateway.transport.server"}})
    assert wrong_way({"tierlake.server.kv.leases": {"tierlake.server.quality.suite"}})
    assert not wrong_way({"tierlake.server.gateway.transport.server": {"tierlake.server.runtime.session",
                                                                      "tierlake.server.gateway.transport.protocol"}})


# The gateway's own parts (server/gateway/__init__.py), lowest first, by the same rule: a part imports
# only parts of lower layers. Routing's handlers implement the transport's statement handler interface;
# both decide on auth's parse; auth and results import nothing else of the gateway.
GATEWAY = "tierlake.server.gateway"
GATEWAY_LAYERS: list[set[str]] = [
    {"auth", "results"},  # logins, roles, authorisation on Spark's parse; LocalResult → HiveServer2 row sets
    {"transport"},  # the Thrift server, framing, SASL/TLS, connection slots, the relay to Spark's Thrift server
    {"routing"},  # the statements the gateway answers itself: INSERTs, sys reads, CALL sys.*, tiered DDL
]


def _gateway_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[3] if _within(module, GATEWAY) and len(parts) > 3 else None


def gateway_wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a part of the gateway to one of the same or a higher layer."""
    layer = {name: i for i, names in enumerate(GATEWAY_LAYERS) for name in names}
    return sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                  if (a := _gateway_part(module)) and (b := _gateway_part(target)) and a != b
                  and layer[b] >= layer[a])


def test_every_gateway_module_has_a_part_with_a_layer():
    layered = set().union(*GATEWAY_LAYERS)
    parts = {_gateway_part(m) for m in import_graph()} - {None}
    assert parts <= layered, f"add these to GATEWAY_LAYERS and docs/architecture.md: {sorted(parts - layered)}"


def test_gateway_parts_import_only_lower_layers():
    offenders = gateway_wrong_way(import_graph())
    assert not offenders, "gateway parts import upwards or sideways (docs/architecture.md):\n  " + \
        "\n  ".join(offenders)


def test_the_gateway_rule_catches_upward_and_sideways_imports():
    assert gateway_wrong_way({f"{GATEWAY}.auth.authz": {f"{GATEWAY}.routing.handler"}})
    assert gateway_wrong_way({f"{GATEWAY}.results": {f"{GATEWAY}.auth.planauth"}})
    assert not gateway_wrong_way({f"{GATEWAY}.routing.handler": {f"{GATEWAY}.transport.protocol",
                                                                 f"{GATEWAY}.auth.planauth"}})


# ---- the JVM halves: each feature's java/ beside its Python, by the same layers ----

JAVA_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.S)


def java_sources() -> dict[str, Path]:
    """Every Java class of ours as ``tierlake.server.<package>.java.<Class>`` → file."""
    return {".".join([ROOT_PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]): path
            for path in sorted((ROOT / "server").rglob("java/*.java"))}


def java_graph() -> dict[str, set[str]]:
    """Java class → the classes of ours its code (not its comments or strings) names."""
    sources = java_sources()
    simple = {name.rpartition(".")[2]: name for name in sources}
    graph = {}
    for name, path in sources.items():
        code = JAVA_COMMENT_OR_STRING.sub(" ", path.read_text())
        words = set(re.findall(r"\b[A-Z]\w*\b", code))
        graph[name] = {simple[w] for w in words if w in simple and simple[w] != name}
    return graph


def feature_of(java_class: str) -> str:
    """``tierlake.server.gateway.auth.java.AuthzCheck`` → ``tierlake.server.gateway.auth``."""
    return java_class.rpartition(".java.")[0]


def java_feature_graph() -> dict[str, set[str]]:
    """Feature (the package a java/ folder sits in) → the features its classes name."""
    graph: dict[str, set[str]] = {}
    for cls, targets in java_graph().items():
        own = feature_of(cls)
        graph.setdefault(own, set()).update(feature_of(t) for t in targets if feature_of(t) != own)
    return graph


def test_every_java_class_sits_beside_a_python_package_that_owns_it():
    for name, path in java_sources().items():
        owner = path.parent.parent
        assert (owner / "__init__.py").exists(), f"{path}: java/ must sit in a Python package (its feature)"
        assert _server_package(feature_of(name)) in set().union(*SERVER_LAYERS), name


def test_java_classes_name_only_their_own_features_or_lower_layers():
    graph = java_feature_graph()
    offenders = wrong_way(graph) + gateway_wrong_way(graph)
    assert not offenders, "Java classes name classes of the same or a higher layer:\n  " + "\n  ".join(offenders)
    found = cycles(graph)
    assert not found, "Java circles between features:\n" + "\n".join(" → ".join(c) for c in found)


def test_every_java_class_is_named_by_a_test():
    """JVM classes get tests of their own (driven from pytest): a test module names each class."""
    texts = [path.read_text() for path in (ROOT / "tests").rglob("test_*.py") if path.name != "test_architecture.py"]
    untested = sorted(name.rpartition(".")[2] for name in java_sources()
                      if not any(re.search(rf"\b{re.escape(name.rpartition('.')[2])}\b", t) for t in texts))
    assert not untested, f"no test names these JVM classes: {untested}"


def test_the_java_graph_sees_code_and_not_comments():
    graph = java_graph()
    ingest = "tierlake.server.ingest.java.StreamIngest"
    assert "tierlake.server.metastore.java.CasAlterHandler" in graph[ingest]
    assert "tierlake.server.catalog.java.SparkKeys" in graph[ingest]
    # AuthzCheck names StreamIngest only inside a string (a frame's class name): no edge.
    assert ingest not in graph["tierlake.server.gateway.auth.java.AuthzCheck"]
    # The rules above catch a Java edge the wrong way: the bounds naming authorisation.
    assert wrong_way({"tierlake.server.bounds": {"tierlake.server.gateway.auth"}})


# ---- one reader of JVM failures ----

JVM_ERRORS = "tierlake.server.runtime.jvm_errors"
# What only the one reader may touch: py4j's and pyspark's handles on the Java throwable, its getters.
JAVA_ERROR_HANDLES = {"java_exception", "_origin", "getMessage", "getErrorClass", "getMessageParameters"}


def java_error_reads(modules: dict[str, Path] | None = None) -> list[str]:
    """Places outside jvm_errors that read a JVM failure themselves: a Java throwable's handle or getter,
    or a substring test on the text of an exception an ``except … as e`` caught."""
    out = []
    for name, path in (modules or source_modules()).items():
        if name == JVM_ERRORS:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in JAVA_ERROR_HANDLES:
                out.append(f"{name}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.Constant) and node.value in JAVA_ERROR_HANDLES:
                out.append(f"{name}:{node.lineno} {node.value!r}")
            elif isinstance(node, ast.ExceptHandler) and node.name:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in inner.ops):
                        for side in inner.comparators:
                            if (isinstance(side, ast.Call) and isinstance(side.func, ast.Name)
                                    and side.func.id == "str" and side.args
                                    and isinstance(side.args[0], ast.Name) and side.args[0].id == node.name):
                                out.append(f"{name}:{inner.lineno} `in str({node.name})`")
    return sorted(out)


def test_only_jvm_errors_reads_java_failures():
    offenders = java_error_reads()
    assert not offenders, ("read JVM failures through server/runtime/jvm_errors.py (is_, failure, sqlstate), "
                           "not by their text:\n  " + "\n  ".join(offenders))


def test_the_java_error_rule_sees_text_matching(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(g):\n    try:\n        g()\n    except Exception as e:\n"
                   "        if 'CommitFailedException' in str(e):\n            return e.java_exception\n")
    assert len(java_error_reads({"tierlake.server.x": bad})) == 2


# ---- function-level imports of our own modules say why ----

OWN_ROOTS = ("tierlake", "tierlake_client")
# The client distribution's package: its own modules follow the same rule.
CLIENT_PACKAGE = ROOT / "clients" / "python" / "tierlake_client"
IMPORT_HERE = re.compile(r"#\s*import here:\s*\S")


def _is_own(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] in OWN_ROOTS for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] in OWN_ROOTS
    return False


def unexplained_function_imports(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: statement`` for each function-level import of our own modules with no
    ``# import here: <reason>`` on its line, on the line above it, or on the line above the
    run of consecutive imports it is part of."""
    lines = source.splitlines()
    out = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for field in ("body", "orelse", "finalbody", "handlers"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            run_start = None  # first line of the run of imports the current statement belongs to
            for stmt in body:
                if isinstance(stmt, ast.Import | ast.ImportFrom):
                    run_start = stmt.lineno if run_start is None else run_start
                    if in_function and _is_own(stmt):
                        own_lines = lines[stmt.lineno - 1:stmt.end_lineno]
                        above = [lines[n - 2] for n in {stmt.lineno, run_start} if n >= 2]
                        if not any(IMPORT_HERE.search(line) for line in own_lines + above):
                            out.append(f"{filename}:{stmt.lineno}: {lines[stmt.lineno - 1].strip()}")
                else:
                    run_start = None
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(ast.parse(source, filename=filename), False)
    return out


def test_function_level_imports_of_our_modules_say_why():
    paths = [*source_modules().values(), *sorted(CLIENT_PACKAGE.rglob("*.py"))]
    offenders = [hit for path in paths
                 for hit in unexplained_function_imports(path.read_text(), str(path.relative_to(ROOT)))]
    assert not offenders, (
        "function-level imports of tierlake modules: move them to module level, or write why they cannot be "
        "there as `# import here: <reason>` on the line above (docs/architecture.md):\n  " + "\n  ".join(offenders))


def test_the_import_reason_rule():
    source = """
import os
from tierlake.server import exceptions


def a():
    from tierlake.server.app import Server
    import json
    return Server, json


def b():
    # import here: the CLI's client commands must not load the engine
    from tierlake.server.app import Server
    from tierlake.server.config.config import Config

    from . import sibling  # import here: a reason on the same line
    return Server, Config, sibling


def c():
    from tierlake.server.app import Server

    # import here: a reason for the next run only
    from tierlake.server.config.config import Config
    if True:
        from tierlake_client import jdbc
    return Server, Config, jdbc
"""
    found = unexplained_function_imports(source)
    assert found == ["<source>:7: from tierlake.server.app import Server",
                     "<source>:22: from tierlake.server.app import Server",
                     "<source>:27: from tierlake_client import jdbc"], found
