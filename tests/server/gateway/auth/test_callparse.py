import ast
from pathlib import Path

import pytest

from tierlake.server.exceptions import SqlSyntaxError
from tierlake.server.gateway.auth.callparse import call_head, is_sys_call, parse_call
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


@pytest.mark.parametrize("statement,expected", list(_cases("valid.txt")))
def test_the_head_reads_what_the_parse_reads(statement, expected):
    # The authoriser decides a CALL's role on call_head's name and the handler
    # refuses what call_head cannot read: the two readings must agree on every
    # CALL the parser accepts.
    call = parse_call(statement)
    head = call_head(statement)
    assert head is not None, statement
    assert (head.name, head.arguments, head.named) == (call.name, len(call.args) + len(call.kwargs), len(call.kwargs))


@pytest.mark.parametrize(
    "statement,expected",
    [
        ("CALL sys.v('a,b', \"c)d\", `e,f`)", ("v", 3)),
        ("CALL sys.v(/* , ) */ 1 -- , )\n, 2)", ("v", 2)),
        ("CALL sys.v(array(1, 2), map('k', named_struct('a', 1)))", ("v", 2)),
        ("CALL sys.v('it\\'s, quoted')", ("v", 1)),
        ("CALL sys . `v` ( )", ("v", 0)),
        ("CALL sys.v(1);;", ("v", 1)),
        ("CALL sys.v(1", None),
        ("CALL sys.v(1) trailing", None),
        ("CALL sys.v('open", None),
        ("CALL other.v()", None),
        ("CALL sys.v", None),
        ("SELECT 1", None),
    ],
)
def test_call_head(statement, expected):
    head = call_head(statement)
    assert (None if head is None else (head.name, head.arguments)) == expected


def test_the_head_of_a_megabyte_call_is_read_without_a_tokenizer(monkeypatch):
    import sqlglot

    def refuse(*args, **kwargs):
        raise AssertionError("tokenized")

    monkeypatch.setattr(sqlglot.Dialect, "tokenize", refuse)
    monkeypatch.setattr(sqlglot.tokens.Tokenizer, "tokenize", refuse)
    head = call_head("CALL sys.version(array(" + ",".join(["1"] * 500_000) + "))")
    assert (head.name, head.arguments) == ("version", 1)
