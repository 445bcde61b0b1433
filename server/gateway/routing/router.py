"""The gateway's routes: each statement is decided once, then answered by the handler of its route.

The transport builds one :class:`~server.gateway.transport.protocol.Statement` per ExecuteStatement,
has it authorised (which keeps Spark's parse on it) and hands it to :class:`Router`, the transport's
``StatementHandler``. The router asks its handlers in order whether they answer it
(:meth:`RouteHandler.claim`); the first that does names the route and keeps what it decided on the
statement (``statement.prepared``), and execution goes straight to that handler: nothing is decided
twice, and nothing but the statement object passes between the steps. A statement no handler claims is
relayed to Spark's Thrift server.

The server's routes, in the order they are asked (server/app.py, ``_handler``):

- ``setting`` (ingest.SessionSettings): ``SET``/``RESET`` of a ``tierlake.*`` session setting; it also
  hands every other statement the session's request id, which that statement uses up;
- ``ingest`` (ingest.IngestHandler): an INSERT into a stream table, written by its committer;
- ``call`` (handler.CallHandler): ``CALL sys.<name>(…)``;
- ``ddl`` (handler.DdlHandler): DDL of a tiered table, which needs ``admin`` (:attr:`RouteHandler.role`);
- ``sys-read`` (sys_reads.SysReads): a cacheable read of the ``sys`` views.

A new route is a class with the four members of :class:`RouteHandler`, placed in that list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tierlake.server.gateway.transport.protocol import LocalResult, Statement
from tierlake.server.ingest import request_ids


@runtime_checkable
class RouteHandler(Protocol):
    """One route of the gateway.

    ``name``: the route's name (``statement.route``). ``role``: a role the statement needs beyond what
    the authoriser decided on Spark's parse (None: nothing more), checked by the transport once the
    route is known; ``what`` names the statement in the refusal. ``claim`` decides whether this route
    answers ``statement``, keeping what it decided on it; it must not raise for a statement it does not
    take (a bad one it takes is answered by ``execute``). ``session_closed``: forget the session."""

    name: str
    role: str | None
    what: str

    def claim(self, statement: Statement) -> bool: ...

    def execute(self, statement: Statement) -> LocalResult: ...

    def session_closed(self, guid: bytes) -> None: ...


class Router:
    """The transport's statement handler: its routes, asked in order (the module docstring).

    ``settings``: the route that keeps each session's request id (asked first; every other statement
    takes the id from it, and a statement the gateway refused before routing uses it up too)."""

    def __init__(self, routes: Sequence[RouteHandler], settings=None):
        for route in routes:
            if not isinstance(route, RouteHandler):
                raise TypeError(f"{type(route).__name__} is not a route handler (router.RouteHandler)")
        names = [route.name for route in routes]
        if len(set(names)) != len(names):
            raise ValueError(f"two routes with one name: {names}")
        self.routes = tuple(routes)
        self.settings = settings
        self.by_name = {route.name: route for route in self.routes}

    def route(self, statement: Statement) -> bool:
        for handler in self.routes:
            if handler.claim(statement):
                statement.route, statement.role = handler.name, handler.role
                return True
        return False

    def what(self, statement: Statement) -> str:
        """How a refusal names the statement's route."""
        return self.by_name[statement.route or ""].what

    def execute(self, statement: Statement) -> LocalResult:
        handler = self.by_name[statement.route or ""]
        if statement.request_key is None:
            return handler.execute(statement)
        # A statement the gateway runs with the session's request id current (a CTAS: its commits
        # record it); an INSERT's write carries it itself.
        with request_ids.tagged(statement.request_key):
            return handler.execute(statement)

    def refused(self, statement: Statement) -> None:
        if self.settings is not None:
            self.settings.refused(statement)

    def session_closed(self, guid: bytes) -> None:
        for handler in self.routes:
            handler.session_closed(guid)

    def request_id(self, guid: bytes) -> str | None:
        """The request id session ``guid`` set for its next statement (tests, the status page)."""
        return None if self.settings is None else self.settings.request_id(guid)
