"""Connection-level security of the gateway: TLS with a handshake deadline,
refusing NOSASL clients at a SASL gateway with an error they can read, and
the connection slots (:class:`Admission`) that keep connections which have
not logged in from taking the slots of those which have."""

from __future__ import annotations

import ipaddress
import select
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from TCLIService import TCLIService, ttypes
from thrift.Thrift import TMessageType

from tierlake.server.exceptions import AuthenticationError
from tierlake.server.gateway.transport.protocol import MessageReader, SocketTransport, encode_reply, error_status

# A refused NOSASL client sends an OpenSession first; it is read (up to this
# size) only to answer it.
REFUSED_MESSAGE_LIMIT = 64 * 1024
NOSASL_REFUSED = ("Authentication required: this gateway accepts SASL PLAIN logins only; connect without "
                  "auth=noSasl (Hive JDBC) or with auth='CUSTOM' and a password (PyHive)")


class TlsError(Exception):
    """The TLS handshake with the client failed."""


def start_tls(sock: socket.socket, context: ssl.SSLContext, deadline: float,
              on_wrapped: Callable[[ssl.SSLSocket], None] | None = None) -> ssl.SSLSocket:
    """The server side of the TLS handshake, done by ``deadline``
    (``time.monotonic()``) however slowly the client's bytes arrive: the
    handshake runs non-blocking and waits only for what is left.
    ``on_wrapped(tls)`` runs as soon as the TLS socket exists: wrapping
    detaches ``sock``, so whoever may have to close the connection from
    another thread (an eviction) needs the new socket before the handshake
    starts waiting; it may raise :class:`TlsError` to abandon the handshake."""
    tls = None
    try:
        tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        if on_wrapped is not None:
            on_wrapped(tls)
        tls.setblocking(False)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                wait = ([tls], [])
            except ssl.SSLWantWriteError:
                wait = ([], [tls])
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not any(select.select(*wait, [], remaining)[:2]):
                raise TlsError("TLS handshake timed out")
        tls.setblocking(True)
        return tls
    except (ssl.SSLError, OSError, TlsError) as exc:
        # wrap_socket took the socket over: closing the caller's does nothing.
        if tls is not None:
            tls.close()
        raise TlsError(str(exc) if isinstance(exc, TlsError) else f"{type(exc).__name__}: {exc}") from None


def refuse_nosasl(sock: socket.socket, prefix: bytes, timeout: float) -> bool:
    """Answer a NOSASL client's first message (``prefix`` = the bytes already
    read) with a SQL error, SQLSTATE 28000; a SASL error frame would be
    garbage to it. False when the input was not a readable Thrift call."""
    plain = SocketTransport(sock)
    plain._rbuf = prefix
    sock.settimeout(timeout)
    msg = MessageReader(plain, REFUSED_MESSAGE_LIMIT).read()
    if msg is None or msg.mtype != TMessageType.CALL or not hasattr(ttypes, f"T{msg.name}Resp"):
        return False
    error = AuthenticationError(NOSASL_REFUSED)
    response = getattr(ttypes, f"T{msg.name}Resp")(
        status=error_status(error.message, error.sqlstate, error.error_code))
    result = getattr(TCLIService, f"{msg.name}_result")(success=response)
    plain.write(encode_reply(msg.name, msg.seqid, result))
    plain.flush()
    return True



def address_key(host: str) -> str:
    """The unit a per-address limit counts: an IPv4 address, or an IPv6 /64
    (one host usually owns a whole /64, so counting single IPv6 addresses
    would let it open as many connections as it likes)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Admission:
    """The gateway's connection slots, in two pools.

    A connection is *pending* from accept until it has logged in (TLS and
    SASL done), then *authenticated*. The pools are separate, so connections
    that never log in cannot take a slot from one that did: at most
    ``max_authenticated`` authenticated connections, at most ``max_pending``
    pending ones, of which at most ``max_pending_per_address`` from one
    address (:func:`address_key`).

    A new connection is always let in; when it would overflow its address's
    share or the pending pool, the oldest pending connection of its address
    is evicted instead, or, when the pool is full and its address is not
    among those holding the most, the oldest of the address holding the most. Refusing the newcomer would let whoever
    fills the pool first keep everyone out until the handshake deadline;
    evicting the oldest means a login, which takes milliseconds, can only be
    starved by someone opening more connections from the *same* address
    during those milliseconds than that address's share, and a flood from
    elsewhere never evicts a single connection from an address that is not
    the heaviest.

    Connections are opaque objects (hashable); the gateway closes the ones
    :meth:`admit` returns. Thread-safe.
    """

    def __init__(self, max_authenticated: int, max_pending: int, max_pending_per_address: int):
        if min(max_authenticated, max_pending, max_pending_per_address) < 1:
            raise ValueError("connection limits must be at least 1")
        self.max_authenticated = max_authenticated
        self.max_pending = max_pending
        self.max_pending_per_address = min(max_pending_per_address, max_pending)
        self._lock = threading.Lock()
        # Insertion order is age order: the first entry of an address is its oldest.
        self._pending: dict[Any, str] = {}
        self._per_address: Counter[str] = Counter()
        self._authenticated: set[Any] = set()
        self.evicted = 0  # how many pending connections were evicted, ever (for logs and tests)

    @property
    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def authenticated_count(self) -> int:
        with self._lock:
            return len(self._authenticated)

    def admit(self, conn: Any, host: str) -> list[Any]:
        """Take ``conn`` (just accepted from ``host``) into the pending pool;
        return the pending connections it displaced, for the caller to close."""
        key = address_key(host)
        victims = []
        with self._lock:
            if self._per_address[key] >= self.max_pending_per_address:
                victims.append(self._oldest_of(key))
            elif len(self._pending) >= self.max_pending:
                most = max(self._per_address.values())
                own = self._per_address[key]
                if own and own + 1 >= most:
                    # Counting the newcomer its address is (one of) the heaviest: a flood from one
                    # address displaces its own handshakes, not the lone login of another.
                    victims.append(self._oldest_of(key))
                else:
                    # Ties between addresses go to age: the oldest handshake among the heaviest.
                    victims.append(next(c for c, owner in self._pending.items()
                                        if self._per_address[owner] == most))
            for victim in victims:
                self._drop_pending(victim)
            self.evicted += len(victims)
            self._pending[conn] = key
            self._per_address[key] += 1
        return victims

    def promote(self, conn: Any) -> str | None:
        """Move ``conn`` from the pending pool to the authenticated one; None
        when it got a slot, else why not (evicted meanwhile, or no slot left)."""
        with self._lock:
            if conn not in self._pending:
                return "the connection was closed before it logged in"
            self._drop_pending(conn)
            if len(self._authenticated) >= self.max_authenticated:
                return (f"too many connections: the gateway has {len(self._authenticated)} open "
                        "(tierlake.gateway.max-connections); try again later")
            self._authenticated.add(conn)
            return None

    def forget(self, conn: Any) -> None:
        """``conn`` ended: free whichever slot it held."""
        with self._lock:
            if conn in self._pending:
                self._drop_pending(conn)
            self._authenticated.discard(conn)

    def _oldest_of(self, key: str) -> Any:
        return next(conn for conn, owner in self._pending.items() if owner == key)

    def _drop_pending(self, conn: Any) -> None:
        key = self._pending.pop(conn)
        self._per_address[key] -= 1
        if not self._per_address[key]:
            del self._per_address[key]
