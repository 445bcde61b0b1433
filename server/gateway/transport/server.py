"""The HiveServer2 gateway: a Thrift relay in front of the in-process Spark
Thrift Server that answers some statements (``CALL sys....``) itself.

The transport in four modules: this one listens, admits and drains
(:class:`Gateway`, configured by one settings.GatewaySettings); each client
connection gets its own thread and its own link to the internal STS (SASL
PLAIN with the process's secret: only the gateway gets in), relayed and
checked in connection.py; the statements the gateway answers itself run as
operations of local.py, after authorisation on Spark's parse (auth/authz.py,
auth/planauth.py) and routing (routing/router.py).

Connection slots come in two pools (security.Admission): connections still in
their TLS/SASL handshake cannot take the slots of those that logged in, and a
full handshake pool evicts its oldest member rather than turning away the
newcomer.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable

from tierlake.server.gateway.transport.connection import Connection
from tierlake.server.gateway.transport.liveness import PeerWatch
from tierlake.server.gateway.transport.local import describe
from tierlake.server.gateway.transport.protocol import (
    StatementHandler,
)
from tierlake.server.gateway.transport.sasl import Authenticator
from tierlake.server.gateway.transport.security import Admission
from tierlake.server.gateway.transport.settings import GatewaySettings

log = logging.getLogger("tierlake.gateway")

# A burst of connections (a flood, or clients reconnecting together) waits in the kernel's queue
# while the accept loop catches up; with a short queue the kernel drops SYNs and a client's
# connect stalls for its one-second retransmit, a login included.
LISTEN_BACKLOG = 1024
# At most one warning this often about evicted handshakes: a flood must not flood the log too.
EVICTION_LOG_INTERVAL_S = 10.0


class Gateway:
    """HiveServer2 binary-protocol front end of the tierlake server, configured by one
    :class:`GatewaySettings` (where it listens, the backend it relays to, TLS, limits).

    ``handler`` (a :class:`StatementHandler`, the server's is routing.router.Router) routes each
    statement and answers those it takes; everything else is relayed to the backend.
    ``authenticator(user, password) -> bool`` checks PLAIN logins; ``None`` accepts everyone
    (development mode). ``authorizer`` (see :class:`server.gateway.auth.authz.Authorizer`) checks
    every statement of a session with ``check(user, statement)`` before it is routed or relayed,
    raising a ``TierlakeError`` to refuse it; its ``authenticate`` checks logins when no
    ``authenticator`` is given. ``on_session_opened(guid, secret)`` runs after the backend opened a
    session and before the client hears of it, so it may prepare the session (the server registers
    its UDFs there); its failures are logged.
    """

    def __init__(self, settings: GatewaySettings, handler: StatementHandler, *, authorizer=None,
                 authenticator: Authenticator | None = None,
                 on_session_opened: Callable[[bytes, bytes], None] | None = None):
        if not isinstance(handler, StatementHandler):
            raise TypeError("handler must have route(), execute(), refused() and session_closed() methods")
        if authorizer is not None and getattr(authorizer, "enabled", False) and settings.auth == "NOSASL":
            raise ValueError("auth NOSASL cannot check passwords: use PLAIN with a password file")
        self.settings = settings
        self.host, self.port = settings.host, settings.port  # the port once bound (0: any)
        self.handler = handler
        if authenticator is None and authorizer is not None:
            authenticator = authorizer.authenticate
        self.authenticator = authenticator
        self.authorizer = authorizer
        self._admission = Admission(settings.max_connections, settings.max_unauthenticated,
                                    settings.max_unauthenticated_per_address)
        self._evictions_logged = (0, 0.0)  # (evictions counted, monotonic time) at the last warning
        self.on_session_opened = on_session_opened
        self._sock: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict[Connection, threading.Thread] = {}
        self._counter = 0
        self.peer_watch = PeerWatch()  # synchronous local statements whose client went away are cancelled

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    @property
    def session_count(self) -> int:
        """Client sessions open on this gateway (``tierlake_gateway_sessions``)."""
        with self._lock:
            connections = list(self._connections)
        return sum(len(c.sessions) for c in connections)

    @property
    def unauthenticated_count(self) -> int:
        """Connections holding a handshake slot (not logged in yet)."""
        return self._admission.pending_count

    @property
    def authenticated_count(self) -> int:
        """Connections holding a slot of the logged-in pool."""
        return self._admission.authenticated_count

    def start(self) -> Gateway:
        """Bind and listen; returns once clients can connect."""
        if self._sock is not None:
            raise RuntimeError("gateway already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, backlog=LISTEN_BACKLOG)
        sock.setblocking(False)  # the accept loop selects on it with the waiting room
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._stopping.clear()
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True, name="tierlake-gateway-accept")
        self._accept_thread.start()
        log.info(
            "gateway listening on %s:%d (auth %s%s%s), relaying to %s:%d",
            self.host,
            self.port,
            self.settings.auth,
            ", TLS" if self.settings.ssl_context else "",
            ", password file" if getattr(self.authorizer, "enabled", False) else "",
            self.settings.backend_host,
            self.settings.backend_port,
        )
        return self

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def drain(self, timeout: float = 30.0) -> bool:
        """Stop accepting, refuse new work (:class:`ServerStoppingError`), and wait up to ``timeout``
        until every statement already running has ended and its client has seen how: a write that
        committed is answered as a success, not cut off. True if everything was answered."""
        self._draining.set()
        self._stop_accepting(timeout)
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                busy = [c for c in self._connections if not c.quiet()]
            if not busy or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if busy:
            log.warning("gateway stopping with %d connection(s) still busy after %.0f s", len(busy), timeout)
        return not busy

    def _stop_accepting(self, timeout: float) -> None:
        if self._sock is None:
            return
        self._stopping.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        self._sock.close()
        self._sock = None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting and close every client connection."""
        if self._sock is None and not self._draining.is_set():
            return
        self._stop_accepting(timeout)
        self.peer_watch.stop()
        with self._lock:
            connections = list(self._connections.items())
        for conn, _ in connections:
            conn.close()
        deadline = time.monotonic() + timeout
        for _, thread in connections:
            if thread is not None:  # None: it was still in the waiting room, closed by the accept loop
                thread.join(max(0.0, deadline - time.monotonic()))
        log.info("gateway on port %d stopped", self.port)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        """Accept connections and keep them in a waiting room until their first bytes arrive.

        A connection gets its thread only once it has sent something (every client speaks
        first: a TLS ClientHello, a SASL START, a NOSASL OpenSession). Idle sockets, the cheap
        attack, so cost a selector entry and no thread, and accepting stays quick however many
        arrive: starting a thread waits for it to run, milliseconds on a busy machine, and a
        login queued behind a thousand of them would wait seconds. Everything in the waiting
        room belongs to this thread alone, so closing those sockets here cannot race a reader.
        """
        selector = selectors.DefaultSelector()
        selector.register(self._sock, selectors.EVENT_READ)
        waiting: dict[Connection, float] = {}  # → the handshake deadline; accept order
        try:
            while not self._stopping.is_set():
                timeout = 0.5  # lets the loop notice stop()
                if waiting:
                    timeout = max(0.0, min(timeout, next(iter(waiting.values())) - time.monotonic()))
                for key, _ in selector.select(timeout):
                    if key.data is None:
                        self._accept_some(selector, waiting)
                    elif key.data in waiting:
                        self._wake(selector, waiting, key.data)
                now = time.monotonic()
                while waiting:  # silent until its handshake deadline: it never began one
                    conn, deadline = next(iter(waiting.items()))
                    if deadline > now:
                        break
                    self._drop_waiting(selector, waiting, conn)
        finally:
            for conn in list(waiting):
                self._drop_waiting(selector, waiting, conn)
            selector.close()

    def _accept_some(self, selector: selectors.BaseSelector, waiting: dict) -> None:
        for _ in range(256):  # then look at the waiting room again
            try:
                sock, address = self._sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if self._stopping.is_set():
                    return
                log.error("accept failed: %s", exc)  # e.g. out of file descriptors
                time.sleep(0.1)
                return
            # No limit on the newcomer itself: it takes a handshake slot, evicting an older
            # handshake when the pool (or its address's share) is full, so that however many
            # connections sit idle a new login gets its turn.
            sock.setblocking(True)
            conn = Connection(self, sock, address)
            conn.deadline = time.monotonic() + self.settings.handshake_timeout
            with self._lock:
                self._connections[conn] = None
            for victim in self._admission.admit(conn, address[0]):
                if victim in waiting:
                    self._drop_waiting(selector, waiting, victim)
                else:
                    victim.evict()  # its thread ends it
                self._log_evictions()
            waiting[conn] = conn.deadline
            selector.register(sock, selectors.EVENT_READ, conn)

    def _wake(self, selector: selectors.BaseSelector, waiting: dict, conn: Connection) -> None:
        """``conn`` sent its first bytes (or closed): give it its thread."""
        selector.unregister(conn.sock)
        del waiting[conn]
        try:
            conn.sock.setblocking(False)
            gone = conn.sock.recv(1, socket.MSG_PEEK) == b""
            conn.sock.setblocking(True)
        except OSError:
            gone = True
        if gone:  # closed without a word: no thread for that
            self._admission.forget(conn)
            conn.close()
            self._forget(conn)
            return
        with self._lock:
            self._counter += 1
            thread = threading.Thread(target=conn.run, daemon=True, name=f"tierlake-gateway-{self._counter}")
            self._connections[conn] = thread
        thread.start()

    def _drop_waiting(self, selector: selectors.BaseSelector, waiting: dict, conn: Connection) -> None:
        try:
            selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        waiting.pop(conn, None)
        conn.close()
        self._forget(conn)

    def _log_evictions(self) -> None:
        total = self._admission.evicted
        logged, at = self._evictions_logged
        now = time.monotonic()
        if now - at >= EVICTION_LOG_INTERVAL_S:
            self._evictions_logged = (total, now)
            log.warning("evicted %d connection(s) that had not logged in, to make room for new ones "
                        "(%d in their handshake; tierlake.gateway.max-unauthenticated-connections, "
                        "tierlake.gateway.max-unauthenticated-per-address)",
                        total - logged, self._admission.pending_count)

    def session_opened(self, guid: bytes, secret: bytes) -> None:
        """Run the ``on_session_opened`` hook; a failing hook never fails the session."""
        if self.on_session_opened is None:
            return
        try:
            self.on_session_opened(guid, secret)
        except Exception as exc:
            log.warning("on_session_opened hook failed: %s", describe(exc))
            log.debug("on_session_opened failure", exc_info=True)

    def _forget(self, conn: Connection) -> None:
        self._admission.forget(conn)
        with self._lock:
            self._connections.pop(conn, None)
