"""Cheap refusals first (issue 51): a CALL's procedure, its arity and its size
are checked before its arguments are parsed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tierlake.server.exceptions import (
    InvalidArgumentError,
    SqlSyntaxError,
    StatementTooLargeError,
    UnknownProcedureError,
)
from tierlake.server.gateway.auth import authz
from tierlake.server.gateway.routing import handler as handler_module
from tierlake.server.gateway.routing.handler import CallHandler
from tierlake.server.sqlapi.registry import Registry
from tierlake.server.sqlapi.roles import ADMIN, READER


@pytest.fixture
def registry():
    r = Registry()

    @r.procedure(returns=[("v", "string")], role=READER, read_only=True)
    def version(ctx):
        """The version."""
        return [("1",)]

    @r.procedure(returns=[("n", "bigint")], role=ADMIN)
    def describe(ctx, name: str, detail: bool = False):
        """Describe.

        Args:
          name: a name
          detail: more
        """
        return [(len(name),)]

    return r


@pytest.fixture
def no_parse(monkeypatch):
    def refuse(statement):
        raise AssertionError("the arguments were parsed")

    monkeypatch.setattr(handler_module, "parse_call", refuse)


def handler(registry, size=1000):
    return CallHandler(registry, lambda user: SimpleNamespace(), max_call_size=size)


def test_a_megabyte_of_arguments_to_a_procedure_that_takes_none_is_refused_unparsed(registry, no_parse):
    statement = "CALL sys.version(array(" + ",".join(["1"] * 500_000) + "))"
    with pytest.raises(InvalidArgumentError) as info:
        handler(registry).call(statement)
    assert info.value.message.startswith("sys.version takes at most 0 argument(s), got 1; signature: sys.version()")


def test_too_many_arguments_are_refused_unparsed(registry, no_parse):
    with pytest.raises(InvalidArgumentError, match="sys.describe takes at most 2 argument"):
        handler(registry).call("CALL sys.describe('a', true, false)")


def test_a_named_argument_too_many_is_named(registry):
    with pytest.raises(InvalidArgumentError, match="sys.version has no parameter 'extra'"):
        handler(registry).call("CALL sys.version(extra => 1)")


def test_an_unknown_procedure_is_refused_unparsed(registry, no_parse):
    with pytest.raises(UnknownProcedureError, match="did you mean sys.version"):
        handler(registry).call("CALL sys.verison(" + "'x'," * 10_000 + "'x')")


def test_a_call_over_the_size_bound_is_refused_unparsed(registry, no_parse):
    statement = "CALL sys.describe('" + "x" * 2000 + "')"
    with pytest.raises(StatementTooLargeError) as info:
        handler(registry).call(statement)
    assert info.value.sqlstate == "54000"
    assert info.value.message == (
        f"CALL too large: {len(statement)} bytes; tierlake.gateway.max-call-size is 1000 bytes")


def test_within_the_bounds_the_call_runs(registry):
    result = handler(registry).call("CALL sys.describe('abc')")
    assert result.rows == [(3,)]


def test_a_malformed_call_gets_the_parsers_reason(registry):
    with pytest.raises(SqlSyntaxError, match="is not closed with"):
        handler(registry).call("CALL sys.describe('abc'")


def test_a_malformed_call_over_the_bound_is_not_parsed(registry, no_parse):
    with pytest.raises(SqlSyntaxError, match="expected CALL sys.<procedure>"):
        handler(registry).call("CALL sys.describe('" + "x" * 2000)


def test_the_role_is_the_procedure_the_handler_runs(registry):
    assert authz.call_requirement("CALL sys.describe('a')", registry).role == ADMIN
    assert authz.call_requirement("CALL sys . `describe` ('a')", registry).role == ADMIN
    assert authz.call_requirement("CALL sys.version()", registry).role == READER
    # Not readable by call_head: the handler refuses it, whatever the role.
    assert authz.call_requirement("CALL sys.describe('a'", registry).role == READER
