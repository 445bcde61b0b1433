"""The gateway's link to the internal Spark Thrift Server.

The internal server accepts one login only (server/runtime/java/
SecretAuthenticator.java): SASL PLAIN with this process's random secret as
the password. The gateway logs in as the client's authenticated user, so
Spark's sessions carry the right user name; nobody else on the host can reach
Spark without going through the gateway's checks.
"""

from __future__ import annotations

import socket
import time

from tierlake.server.gateway.transport.protocol import SocketTransport
from tierlake.server.gateway.transport.sasl import _HEADER, COMPLETE, OK, START, SaslServerTransport, recv_exact


class UpstreamError(Exception):
    """The internal server refused the gateway's login."""


class SaslClientTransport(SaslServerTransport):
    """The client side of SASL PLAIN; data frames as in the server transport."""

    def login(self, user: str, secret: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.sock.sendall(_HEADER.pack(START, 5) + b"PLAIN")
        token = b"\0" + user.encode("utf-8") + b"\0" + secret.encode("utf-8")
        self.sock.sendall(_HEADER.pack(COMPLETE, len(token)) + token)
        while True:
            status, length = _HEADER.unpack(recv_exact(self.sock, _HEADER.size, deadline))
            payload = recv_exact(self.sock, length, deadline) if length else b""
            if status == COMPLETE:
                break
            if status != OK:
                raise UpstreamError(payload.decode("utf-8", "replace") or f"SASL status {status}")
        self.sock.settimeout(None)


def connect_upstream(host: str, port: int, user: str | None, secret: str | None, timeout: float,
                     max_frame: int):
    """A connected transport to the internal server: SASL with ``secret``,
    or plain Thrift when there is no secret (a gateway in front of a
    server of its own, as in the unit tests)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if secret is None:
        sock.settimeout(None)
        return SocketTransport(sock)
    transport = SaslClientTransport(sock, None, max_frame)
    try:
        transport.login(user or "tierlake", secret, timeout)
    except BaseException:
        sock.close()
        raise
    return transport
