"""How the gateway listens, admits and relays, as one object: :class:`GatewaySettings`."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from tierlake.server.config import settings
from tierlake.server.gateway.transport.protocol import DEFAULT_MAX_MESSAGE, DEFAULT_MAX_REQUEST


@dataclass(frozen=True)
class GatewaySettings:
    """Everything the gateway is configured with, from the server's ``tierlake.gateway.*`` settings
    (:meth:`from_config`) or built directly (tests: only ``backend_port`` is needed).

    The backend is the Spark Thrift Server at ``backend_host:backend_port``: with ``backend_secret``, a
    server that takes SASL PLAIN with that secret as the password (the internal STS), else a NOSASL one.
    ``auth`` is ``"PLAIN"`` (SASL PLAIN, what Hive calls NONE/LDAP/CUSTOM; ``"NONE"`` is accepted as an
    alias) or ``"NOSASL"`` (raw Thrift, clients use ``auth=noSasl``). ``ssl_context`` (a server-side
    :class:`ssl.SSLContext`) turns on TLS for every client.

    Connection slots (:class:`~server.gateway.transport.security.Admission`): ``max_connections``
    logged-in connections, and apart from them ``max_unauthenticated`` connections still in their
    handshakes, at most ``max_unauthenticated_per_address`` of them from one address. A limit left
    None takes its ``tierlake.gateway.*`` setting's default (the registry holds the defaults).
    """

    backend_port: int
    host: str = "127.0.0.1"
    port: int = 0
    backend_host: str = "127.0.0.1"
    backend_secret: str | None = None
    auth: str = "PLAIN"
    ssl_context: ssl.SSLContext | None = None
    connect_timeout: float = 10.0
    handshake_timeout: float = 30.0
    max_message_size: int = DEFAULT_MAX_MESSAGE
    max_request_size: int = DEFAULT_MAX_REQUEST
    max_reply_size: int | None = None
    max_connections: int | None = None
    max_unauthenticated: int | None = None
    max_unauthenticated_per_address: int | None = None

    def __post_init__(self) -> None:
        mode = (self.auth or "PLAIN").upper()
        mode = "PLAIN" if mode == "NONE" else mode
        if mode not in ("PLAIN", "NOSASL"):
            raise ValueError(f"auth must be 'PLAIN' or 'NOSASL', not {self.auth!r}")
        object.__setattr__(self, "auth", mode)
        for name, key in (("max_reply_size", "tierlake.gateway.max-reply-size"),
                          ("max_connections", "tierlake.gateway.max-connections"),
                          ("max_unauthenticated", "tierlake.gateway.max-unauthenticated-connections"),
                          ("max_unauthenticated_per_address", "tierlake.gateway.max-unauthenticated-per-address")):
            if getattr(self, name) is None:
                object.__setattr__(self, name, settings.parse_default(key))

    @classmethod
    def from_config(cls, config: Any, backend_port: int, backend_secret: str | None = None,
                    ssl_context: ssl.SSLContext | None = None) -> GatewaySettings:
        """The settings of ``config`` (a server Config), relaying to the internal STS at ``backend_port``."""
        return cls(backend_port=backend_port, host=config.text("tierlake.gateway.host"),
                   port=config.int("tierlake.gateway.port"), backend_secret=backend_secret,
                   auth=config.choice("tierlake.gateway.auth"), ssl_context=ssl_context,
                   handshake_timeout=config.seconds("tierlake.gateway.handshake-timeout"),
                   max_request_size=config.int("tierlake.gateway.max-request-size"),
                   max_reply_size=config.int("tierlake.gateway.max-reply-size"),
                   max_connections=config.int("tierlake.gateway.max-connections"),
                   max_unauthenticated=config.int("tierlake.gateway.max-unauthenticated-connections"),
                   max_unauthenticated_per_address=config.int("tierlake.gateway.max-unauthenticated-per-address"))
