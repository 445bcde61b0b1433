"""What a running procedure gets: :class:`Context`.

Built per call by the composition root (``Server.context``); tests build one
with only the fields they need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlake.server.coordinator.coordinator import Coordinator
    from tierlake.server.runtime.config import Config
    from tierlake.server.sqlapi.registry import Registry


@dataclass
class Context:
    """The Spark session, the config, the caller and the server's parts a procedure may use."""

    spark: Any
    config: Config | None = None
    user: str | None = None
    coordinator: Coordinator | None = None
    registry: Registry | None = None
    """The registry the call was looked up in (``sys.describe_procedure`` reads it)."""
    jdbc_url: str | None = None
    """The gateway's JDBC URL; ``None`` without a gateway."""
    metastore_uri: str | None = None
    """The metastore Thrift service's URI; ``None`` when it is off."""
    tiering_workers: int = 0
    """In-process tiering workers of this server."""
