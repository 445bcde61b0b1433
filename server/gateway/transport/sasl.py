"""Server side of the SASL PLAIN negotiation HiveServer2 clients perform.

Hive JDBC (``hive.server2.authentication=NONE/LDAP/CUSTOM``), PyHive (via
``thrift_sasl``) and most ODBC drivers wrap the Thrift binary protocol in the
libthrift ``TSaslTransport`` framing. Only PLAIN is offered: Kerberos is out of
scope and the password check is delegated to a pluggable ``authenticator``.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable
from typing import NoReturn

from thrift.transport.TTransport import TTransportBase, TTransportException

from tierlake.server.observability import metrics

log = logging.getLogger("tierlake.gateway")

START = 1
OK = 2
BAD = 3
ERROR = 4
COMPLETE = 5

Authenticator = Callable[[str, str], bool]

# Negotiation frames carry a mechanism name or "authzid\0user\0password";
# anything bigger is garbage (or a non-SASL client) and must not make us
# allocate or wait for megabytes.
MAX_NEGOTIATION_FRAME = 64 * 1024
DEFAULT_MAX_FRAME = 256 * 1024 * 1024

_HEADER = struct.Struct(">BI")
_LENGTH = struct.Struct(">I")


class BufferedSocketTransport(TTransportBase):
    """Shared by the plain and the SASL transports: reads come from
    ``read`` (one buffer at a time), writes are collected until ``flush``."""

    def readAll(self, sz: int) -> bytes:
        chunks = []
        while sz > 0:
            chunk = self.read(sz)
            chunks.append(chunk)
            sz -= len(chunk)
        return b"".join(chunks)

    def write(self, buf: bytes) -> None:
        self._wbuf.append(bytes(buf))


class SaslError(Exception):
    """The SASL negotiation failed; the peer has already been told why."""


class NotSaslClient(SaslError):
    """The peer speaks raw Thrift (a NOSASL client); ``prefix`` holds the bytes
    already read, so the caller can answer its first message with an error."""

    def __init__(self, prefix: bytes):
        super().__init__("a NOSASL client (auth=noSasl) connected to a SASL gateway")
        self.prefix = prefix


def accept_any(user: str, password: str) -> bool:
    """Development-mode authenticator: every user/password pair is accepted."""
    return True


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """Read exactly ``n`` bytes or raise END_OF_FILE; with a ``deadline``
    (``time.monotonic()``), TimeoutError once it passed, however the bytes
    trickle in (a per-read timeout alone lets one byte every few seconds
    hold the connection forever)."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("deadline passed")
            sock.settimeout(remaining)
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise TTransportException(
                TTransportException.END_OF_FILE,
                f"peer closed the connection ({len(buf)} of {n} bytes read)")
        buf += chunk
    return bytes(buf)


class SaslServerTransport(BufferedSocketTransport):
    """A TTransport over a client socket that negotiates SASL PLAIN, then
    (de)frames Thrift data as ``[len u32 big-endian][payload]``.

    Call :meth:`handshake` first; afterwards ``read``/``readAll`` return the
    concatenated frame payloads (a Thrift message may span frames) and every
    ``flush`` sends what was written since the previous flush as one frame.
    """

    def __init__(self, sock: socket.socket, authenticator: Authenticator | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME, handshake_timeout: float = 30.0):
        self.sock = sock
        self.authenticator = authenticator or accept_any
        self.max_frame_size = max_frame_size
        self.handshake_timeout = handshake_timeout
        self.user: str | None = None
        self._deadline: float | None = None
        self._rbuf = b""
        self._rpos = 0
        self._wbuf: list = []
        self._open = True
        self._started = False
        self._admit: Callable[[str], str | None] | None = None

    # -- negotiation ------------------------------------------------------
    def _recv_negotiation(self) -> tuple:
        header = recv_exact(self.sock, _HEADER.size, self._deadline)
        status, length = _HEADER.unpack(header)
        if status == 0x80 and not self._started:
            # The first byte of a strict TBinaryProtocol message: a NOSASL
            # client, which could not read a SASL error frame.
            raise NotSaslClient(header)
        if status not in (START, OK, BAD, ERROR, COMPLETE):
            self._fail(ERROR, f"Invalid SASL status {status}")
        if length > MAX_NEGOTIATION_FRAME:
            self._fail(ERROR, f"SASL negotiation frame too large ({length} bytes)")
        return status, recv_exact(self.sock, length, self._deadline) if length else b""

    def _send_negotiation(self, status: int, payload: bytes = b"") -> None:
        self.sock.sendall(_HEADER.pack(status, len(payload)) + payload)

    def _fail(self, status: int, message: str) -> NoReturn:
        try:
            self._send_negotiation(status, message.encode("utf-8"))
        except OSError:
            pass
        raise SaslError(message)

    def handshake(self, deadline: float | None = None,
                  admit: Callable[[str], str | None] | None = None) -> str:
        """Run the server side of the negotiation; return the authenticated user.

        The whole negotiation must end by ``deadline`` (``time.monotonic()``;
        default: ``handshake_timeout`` from now). ``admit(user)`` runs once
        the password is accepted and before the client hears so: it returns
        None to let the login complete, or why not (no connection slot), which
        the client gets as a SASL ERROR it can show rather than a connection
        that drops after a successful login. Raises :class:`SaslError`
        after sending BAD/ERROR to the client, or a transport error when the
        client disappears mid-negotiation.
        """
        previous_timeout = self.sock.gettimeout()
        self._deadline = deadline if deadline is not None else time.monotonic() + self.handshake_timeout
        self._admit = admit
        try:
            user = self._negotiate()
        except TimeoutError:
            raise SaslError("SASL negotiation timed out") from None
        finally:
            self._deadline = None
            self.sock.settimeout(previous_timeout)
        self.user = user
        return user

    def _negotiate(self) -> str:
        status, payload = self._recv_negotiation()
        self._started = True
        if status != START:
            self._fail(ERROR, f"Expected SASL START, got status {status}")
        mechanism = payload.decode("utf-8", "replace").strip()
        if mechanism.upper() != "PLAIN":
            self._fail(BAD, f"Unsupported mechanism type {mechanism}")
        # thrift_sasl sends the initial response with OK, libthrift's Java
        # client with COMPLETE (its PLAIN client is done after one message).
        # A client with no initial response sends an empty one: challenge it
        # with an empty OK once, as the JDK PLAIN server would.
        status, payload = self._recv_negotiation()
        if status in (OK, COMPLETE) and not payload:
            self._send_negotiation(OK, b"")
            status, payload = self._recv_negotiation()
        if status not in (OK, COMPLETE):
            self._fail(ERROR, f"Expected SASL OK or COMPLETE, got status {status}")
        parts = payload.split(b"\0")
        if len(parts) != 3:
            self._fail(BAD, "Invalid PLAIN message: expected authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            self._fail(BAD, "Invalid PLAIN message: not UTF-8")
        if not user:
            self._fail(BAD, "No user name given")
        if authzid and authzid != user:
            # Hive's PlainSaslServer silently accepts this, which would let
            # any authenticated user act as any other one.
            self._fail(BAD, f"Authorization id {authzid} does not match user {user}")
        try:
            accepted = bool(self.authenticator(user, password))
        except Exception:
            log.exception("authenticator raised for user %r", user)
            accepted = False
        if not accepted:
            metrics.auth_failure("thrift")
            log.warning("authentication failed for user %r", user)
            self._fail(BAD, "Error validating the login")
        refusal = self._admit(user) if self._admit is not None else None
        if refusal is not None:
            self._fail(ERROR, refusal)
        self._send_negotiation(COMPLETE, b"")
        return user

    # -- data phase -------------------------------------------------------
    def isOpen(self) -> bool:
        return self._open

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._open = False
        try:
            self.sock.close()
        except OSError:
            pass

    def _next_frame(self) -> None:
        while True:
            (length,) = _LENGTH.unpack(recv_exact(self.sock, _LENGTH.size))
            if length > self.max_frame_size:
                raise TTransportException(
                    TTransportException.SIZE_LIMIT,
                    f"SASL frame of {length} bytes exceeds the limit of {self.max_frame_size}")
            if length:
                self._rbuf = recv_exact(self.sock, length)
                self._rpos = 0
                return

    def read(self, sz: int) -> bytes:
        if self._rpos >= len(self._rbuf):
            self._next_frame()
        end = min(self._rpos + sz, len(self._rbuf))
        data = self._rbuf[self._rpos:end]
        self._rpos = end
        return data

    def flush(self) -> None:
        data = b"".join(self._wbuf)
        self._wbuf = []
        self.sock.sendall(_LENGTH.pack(len(data)) + data)
