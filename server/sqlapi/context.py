"""What a running procedure gets: :class:`Context`.

Built per call by the composition root (``Server.context``); tests build one
with only the fields they need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tierlake.server.config.config import Config


class ProcedureLookup(Protocol):
    """What a procedure reads of the registry its call was looked up in.

    :class:`~tierlake.server.sqlapi.registry.Registry` is one; it imports this
    module (a procedure's first parameter is a :class:`Context`), so the
    context names the one method it needs instead of importing it back."""

    def get(self, name: str) -> Any:
        """The procedure called ``name`` (with or without ``sys.``)."""
        ...


@dataclass
class Context:
    """The Spark session, the config, the caller and the server's parts a procedure may use."""

    spark: Any
    config: Config | None = None
    user: str | None = None
    coordinator: Any = None
    """The server's :class:`tierlake.server.coordinator.coordinator.Coordinator`, or ``None``.
    The coordinator is a layer above this one (docs/architecture.md): read it through
    ``tierlake.server.coordinator.registration.coordinator(ctx)``, which checks it is there
    and gives it its type."""
    registry: ProcedureLookup | None = None
    """The registry the call was looked up in (``sys.describe_procedure`` reads it)."""
    jdbc_url: str | None = None
    """The gateway's JDBC URL; ``None`` without a gateway."""
    metastore_uri: str | None = None
    """The metastore Thrift service's URI; ``None`` when it is off."""
    tiering_workers: int = 0
    """In-process tiering workers of this server."""
