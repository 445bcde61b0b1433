"""The gateway's router without a JVM (server/gateway/routing/router.py): routes asked in order, the
first claim wins and names the route and its role, execution goes to that route alone."""

from __future__ import annotations

import pytest

from tierlake.server.gateway.routing.router import RouteHandler, Router
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo, Statement, StatementHandler

SESSION = SessionInfo("u", b"s" * 16, 9, "127.0.0.1:1")


class Route:
    def __init__(self, name, prefix, role=None):
        self.name, self.prefix, self.role, self.what = name, prefix, role, f"the {name} route"
        self.claimed, self.executed, self.closed = [], [], []

    def claim(self, statement):
        self.claimed.append(statement.text)
        if statement.text.startswith(self.prefix):
            statement.prepared = f"{self.name}:{statement.text}"
            return True
        return False

    def execute(self, statement):
        self.executed.append(statement.prepared)
        return LocalResult([("route", "string")], [(self.name,)])

    def session_closed(self, guid):
        self.closed.append(guid)


def test_the_first_route_that_claims_answers_and_no_later_route_is_asked():
    a, b, c = Route("a", "A"), Route("b", "B", role="admin"), Route("c", "")
    router = Router([a, b, c])
    assert isinstance(router, StatementHandler) and all(isinstance(r, RouteHandler) for r in (a, b, c))
    statement = Statement("B 1", SESSION)
    assert router.route(statement)
    assert (statement.route, statement.role, statement.prepared) == ("b", "admin", "b:B 1")
    assert a.claimed == ["B 1"] and c.claimed == []  # decided once: c never saw it
    assert router.what(statement) == "the b route"
    assert router.execute(statement).rows == [("b",)]
    assert b.executed == ["b:B 1"] and a.executed == c.executed == []
    router.session_closed(b"g")
    assert a.closed == b.closed == c.closed == [b"g"]


def test_a_statement_no_route_claims_is_relayed():
    router = Router([Route("a", "A")])
    statement = Statement("SELECT 1", SESSION)
    assert not router.route(statement) and statement.route is None


def test_routes_are_checked_when_the_router_is_built():
    class NoClaim:
        name, role, what = "x", None, "x"

        def execute(self, statement):
            return LocalResult([], [])

        def session_closed(self, guid):
            pass

    with pytest.raises(TypeError, match="NoClaim is not a route handler"):
        Router([NoClaim()])
    with pytest.raises(ValueError, match="two routes with one name"):
        Router([Route("a", "A"), Route("a", "B")])
