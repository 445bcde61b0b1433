"""Every procedure has a role, declared in one table (procedures/roles.py)."""

import pytest

from tierlake.procedures import roles
from tierlake.procedures.registry import load_builtins


def test_every_registered_procedure_has_a_role():
    missing = sorted(p.qualified_name for p in load_builtins() if p.name not in roles.PROCEDURE_ROLES)
    assert not missing, f"add these to procedures/roles.py PROCEDURE_ROLES: {missing}"


def test_every_role_in_the_table_is_a_known_role():
    assert set(roles.PROCEDURE_ROLES.values()) <= set(roles.ROLES)


def test_reader_procedures_are_read_only():
    # A state-changing procedure mapped to reader would open it to everyone.
    for proc in load_builtins():
        if roles.PROCEDURE_ROLES.get(proc.name) == roles.READER:
            assert proc.read_only, f"{proc.qualified_name} is mapped to reader but is not read_only"


def test_tiering_protocol_is_the_tiering_service_s_alone():
    for name in ("heartbeat", "acquire_lease", "release_lease", "drop_lease"):
        assert roles.procedure_role(name) == roles.TIERING
        assert not roles.allows({roles.ADMIN, roles.WRITER, roles.READER}, roles.TIERING)
    assert roles.allows({roles.TIERING}, roles.TIERING)


@pytest.mark.parametrize("name", ["enable_tiering", "disable_tiering", "retry_tiering", "create_table_as"])
def test_state_changing_admin_procedures(name):
    assert roles.procedure_role(f"sys.{name}") == roles.ADMIN
    assert not roles.allows({roles.WRITER, roles.READER, roles.TIERING}, roles.ADMIN)


def test_unmapped_procedures_need_admin_and_assign_validates():
    assert roles.procedure_role("some_extension_proc") == roles.ADMIN
    with pytest.raises(ValueError, match="unknown role"):
        roles.assign("x", "superuser")
    roles.assign("Ext_Report", roles.READER)
    try:
        assert roles.procedure_role("sys.ext_report") == roles.READER
    finally:
        roles.PROCEDURE_ROLES.pop("ext_report")
