"""Every procedure declares its role where it is registered (``@registry.procedure(role=...)``)."""

import ast
from pathlib import Path

import pytest

from tierlake.procedures import BUILTIN_MODULES, load_builtins
from tierlake.server.sqlapi import roles
from tierlake.server.sqlapi.registry import Registry

PROCEDURES_DIR = Path(__file__).resolve().parents[2] / "procedures"

# The role of every built-in, as it was in the old one-table procedures/roles.py.
EXPECTED = {
    "version": roles.READER,
    "describe_procedure": roles.READER,
    "server_info": roles.READER,
    "list_tiering_statuses": roles.READER,
    "tiering_job_status": roles.READER,
    "heartbeat": roles.TIERING,
    "acquire_lease": roles.TIERING,
    "release_lease": roles.TIERING,
    "drop_lease": roles.TIERING,
    "enable_tiering": roles.ADMIN,
    "disable_tiering": roles.ADMIN,
    "retry_tiering": roles.ADMIN,
    "drop_stream_commit": roles.ADMIN,
    "create_table_as": roles.ADMIN,
    "kv_snapshot": roles.ADMIN,
    "expire_kv_snapshots": roles.ADMIN,
    "apply_log_retention": roles.ADMIN,
    "validate": roles.WRITER,
    "add_expectation": roles.ADMIN,
    "drop_expectation": roles.ADMIN,
    "run_maintenance": roles.ADMIN,
    "maintenance_due": roles.TIERING,
    "record_maintenance": roles.TIERING,
}


def _procedure_decorators(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                        and deco.func.attr == "procedure"):
                    yield node.name, deco


def test_every_builtin_declares_its_role_explicitly():
    # The default (admin) is a safety net for extensions, not a way to leave a built-in's role unsaid.
    undeclared, seen = [], set()
    for module in BUILTIN_MODULES:
        path = PROCEDURES_DIR / (module.rsplit(".", 1)[1] + ".py")
        for name, deco in _procedure_decorators(ast.parse(path.read_text(), str(path))):
            seen.add(name)
            if not any(k.arg == "role" for k in deco.keywords):
                undeclared.append(f"{path.name}: {name}")
    assert not undeclared, f"add role=... to @registry.procedure of: {undeclared}"
    assert seen >= {p.func.__name__ for p in load_builtins()}


def test_builtin_roles_are_unchanged():
    assert {p.name: p.role for p in load_builtins()} == EXPECTED


def test_every_declared_role_is_a_known_role():
    assert {p.role for p in load_builtins()} <= set(roles.ROLES)


def test_reader_procedures_are_read_only():
    # A state-changing procedure given the reader role would open it to everyone.
    for proc in load_builtins():
        if proc.role == roles.READER:
            assert proc.read_only, f"{proc.qualified_name} has the reader role but is not read_only"


def test_tiering_protocol_is_the_tiering_service_s_alone():
    registry = load_builtins()
    for name in ("heartbeat", "acquire_lease", "release_lease", "drop_lease"):
        assert registry.get(name).role == roles.TIERING
        assert not roles.allows({roles.ADMIN, roles.WRITER, roles.READER}, roles.TIERING)
    assert roles.allows({roles.TIERING}, roles.TIERING)


@pytest.mark.parametrize("name", ["enable_tiering", "disable_tiering", "retry_tiering", "create_table_as"])
def test_state_changing_admin_procedures(name):
    assert load_builtins().get(f"sys.{name}").role == roles.ADMIN
    assert not roles.allows({roles.WRITER, roles.READER, roles.TIERING}, roles.ADMIN)


def test_an_extension_without_a_role_needs_admin_and_unknown_roles_are_refused():
    registry = Registry()

    @registry.procedure(returns=[("x", "string")])
    def ext_admin(ctx):
        """An extension that says nothing about its role."""
        return []

    @registry.procedure(returns=[("x", "string")], role=roles.READER, read_only=True)
    def ext_report(ctx):
        """An extension report."""
        return []

    assert registry.get("ext_admin").role == roles.ADMIN
    assert registry.get("sys.Ext_Report").role == roles.READER
    with pytest.raises(ValueError, match="unknown role"):
        registry.register(lambda ctx: [], name="x", returns=[("x", "string")], role="superuser")
