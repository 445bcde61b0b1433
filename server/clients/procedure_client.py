"""The one procedure client: ``CALL sys.*`` from Python, in-process or over JDBC.

A transport runs one procedure and returns its rows:

- :class:`LocalClient` calls the server's registry in-process (tiering
  workers inside ``tierlake server``; ``Admin(LocalClient(server))``);
- :class:`JdbcClient` (from the client distribution, ``tierlake_client``)
  sends the same call as a ``CALL`` statement through the gateway
  (``tierlake tiering-service`` processes, ``Admin.connect``).

:class:`Admin` is the typed API on top of either.
"""

from __future__ import annotations

from typing import Any

from tierlake_client.procedure_client import Admin, JdbcClient, TableTieringStatus, Transport

from tierlake.server.sqlapi.types import SqlMap, SqlStruct

__all__ = ["Admin", "JdbcClient", "LocalClient", "TableTieringStatus", "Transport"]


class LocalClient:
    """Calls procedures in the server's own registry, as ``user``."""

    def __init__(self, server: Any, user: str | None = "tiering-service"):
        self.server = server
        self.user = user

    def call(self, procedure: str, **arguments: Any) -> list[tuple]:
        # The values a CALL statement would parse to: plain dicts are named_structs.
        def convert(value):
            if isinstance(value, list):
                return [convert(v) for v in value]
            if isinstance(value, SqlMap):
                return SqlMap({k: convert(v) for k, v in value.items()})
            if isinstance(value, dict):
                return SqlStruct({k: convert(v) for k, v in value.items()})
            return value

        proc = self.server.registry.get(procedure)
        return proc.invoke(self.server.context(self.user), [], {k: convert(v) for k, v in arguments.items()})

    def close(self) -> None:
        pass
