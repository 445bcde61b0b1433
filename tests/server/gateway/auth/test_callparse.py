import ast
from pathlib import Path

import pytest

from tierlake.server.exceptions import SqlSyntaxError
from tierlake.server.gateway.auth.callparse import is_sys_call, parse_call
from tierlake.server.sqlapi.types import SqlMap, SqlStruct

FIXTURES = Path(__file__).parents[3] / "fixtures" / "calls"


def _cases(name):
    for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            statement, _, expected = line.partition(" ==> ")
            yield pytest.param(statement, expected, id=statement[:60])


@pytest.mark.parametrize("statement,expected", list(_cases("valid.txt")))
def test_golden_valid(statement, expected):
    name, args, kwargs = (part.strip() for part in expected.split(" | "))
    call = parse_call(statement)
    assert call.name == name
    assert call.args == ast.literal_eval(args)
    assert call.kwargs == ast.literal_eval(kwargs)


@pytest.mark.parametrize("statement,fragment", list(_cases("invalid.txt")))
def test_golden_invalid(statement, fragment):
    with pytest.raises(SqlSyntaxError) as info:
        parse_call(statement)
    assert fragment in info.value.message
    assert info.value.sqlstate == "42601"


def test_struct_and_map_keep_their_kind():
    call = parse_call("CALL sys.x(named_struct('a', 1), map('a', 1))")
    assert isinstance(call.args[0], SqlStruct)
    assert isinstance(call.args[1], SqlMap)


@pytest.mark.parametrize(
    "statement,expected",
    [
        ("CALL sys.version()", True),
        ("  /* c */ call SYS.v()", True),
        ("CALL sys.version(", True),  # malformed, still ours: we answer with the error
        ("CALL spark_catalog.system.rewrite_data_files('t')", False),
        ("CALL system.expire_snapshots('t')", False),
        ("SELECT 'CALL sys.version()'", False),
        ("", False),
    ],
)
def test_is_sys_call(statement, expected):
    assert is_sys_call(statement) is expected


def test_deep_nesting_is_a_syntax_error_not_a_crash():
    depth = 3000
    with pytest.raises(SqlSyntaxError, match="nested too deeply|cannot parse"):
        parse_call("CALL sys.x(" + "array(" * depth + ")" * depth + ")")
