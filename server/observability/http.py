"""The observability HTTP server: ``/metrics`` (Prometheus text format) and the status page.

One port (``tierlake.http.port``), bound to the gateway's host, TLS when the
gateway has TLS. Logins are the gateway's: with a password file every request
needs HTTP Basic credentials of a user holding ``reader``, ``writer`` or
``admin`` (Prometheus sends them with ``basic_auth``); in development mode
anyone may look, as anyone may connect to the gateway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tierlake.server.observability import metrics, status_page

log = logging.getLogger("tierlake.observability")

VIEWER_ROLES = frozenset({"reader", "writer", "admin"})
# A password check costs ~50 ms of a core (the gateway's password hashing): a page that refreshes and
# Prometheus scraping every few seconds would pay it every time without this.
LOGIN_CACHE_S = 60.0
# Budgets of this door, apart from the gateway's (issue 51): 48 clients sending wrong passwords to /metrics
# took the gateway's 4 password checks and raised an admin's login + SELECT 1 from 2.2 s to 26 s.
# Connections open at once, in all and per client address (the rest are answered 503 at once, no thread):
HTTP_MAX_CONNECTIONS = 64
HTTP_MAX_PER_ADDRESS = 16
# Password checks of this door at once (one core at most, the gateway keeps its own four), and how long a
# request waits for one before it is answered 503.
HTTP_CONCURRENT_CHECKS = 1
CHECK_WAIT_S = 2.0


class Busy(Exception):
    """This door's budget of password checks is spent: 503, try again."""


class _Budget:
    """A bounded number of password checks at once; ``with`` waits at most
    ``wait_s`` for one, then raises :class:`Busy` (the check never runs)."""

    def __init__(self, size: int, wait_s: float):
        self._slots = threading.BoundedSemaphore(size)
        self.wait_s = wait_s

    def __enter__(self) -> _Budget:
        if not self._slots.acquire(timeout=self.wait_s):
            raise Busy
        return self

    def __exit__(self, *exc: Any) -> None:
        self._slots.release()


class Logins(Protocol):
    """What the gateway's authoriser offers (``server/gateway/auth/authz.Authorizer``)."""

    @property
    def enabled(self) -> bool: ...

    def authenticate(self, user: str, password: str, checks: Any = None) -> bool: ...

    def roles(self, user: str | None) -> frozenset[str]: ...


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ObservabilityHttp):
        import socket

        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.owner = owner
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        """A thread per connection, within this door's connection budget: over it, the connection is
        answered 503 (plain HTTP) or closed (TLS, before any handshake) at once, in the accepting thread."""
        host = client_address[0]
        with self.owner._conn_lock:
            total, mine = sum(self.owner._conns.values()), self.owner._conns.get(host, 0)
            admitted = total < HTTP_MAX_CONNECTIONS and mine < HTTP_MAX_PER_ADDRESS
            if admitted:
                self.owner._conns[host] = mine + 1
        if not admitted:
            try:
                if self.owner.ssl_context is None:
                    request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                                    b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            host = client_address[0]
            with self.owner._conn_lock:
                left = self.owner._conns.get(host, 1) - 1
                if left > 0:
                    self.owner._conns[host] = left
                else:
                    self.owner._conns.pop(host, None)

    def handle_error(self, request, client_address) -> None:
        # socketserver prints a traceback to stderr: a plain-HTTP client on a TLS port, a scanner.
        log.debug("HTTP request from %s failed", client_address, exc_info=True)

    def get_request(self):
        sock, address = super().get_request()
        if self.owner.ssl_context is not None:
            # The handshake runs in the request's thread (do_handshake_on_connect on first read).
            sock = self.owner.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address


class _Handler(BaseHTTPRequestHandler):
    server_version = "tierlake"
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        # One line per scrape would be the noise issue 39 removed from the gateway.
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        owner: ObservabilityHttp = self.server.owner  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        try:
            allowed = owner.allowed(self.headers.get("Authorization"))
        except Busy:
            self._send(503, "text/plain; charset=utf-8", b"busy: too many logins at once; try again\n",
                       {"Retry-After": "1"})
            return
        if not allowed:
            self._send(401, "text/plain; charset=utf-8",
                       b"authentication required: log in as a tierlake user with the reader role\n",
                       {"WWW-Authenticate": 'Basic realm="tierlake", charset="UTF-8"'})
            return
        try:
            if url.path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, metrics.exposition())
            elif url.path == "/" and owner.source is not None:
                self._send(200, "text/html; charset=utf-8", status_page.overview(owner.source).encode())
            elif url.path == "/table" and owner.source is not None:
                name = parse_qs(url.query).get("name", [""])[0]
                database, _, table = name.partition(".")
                page = status_page.table_page(owner.source, database, table)
                if page is None:
                    self._send(404, "text/plain; charset=utf-8", f"{name} is not a tiered table\n".encode())
                else:
                    self._send(200, "text/html; charset=utf-8", page.encode())
            elif url.path == "/":
                self._send(200, "text/plain; charset=utf-8", b"tierlake tiering-service: metrics at /metrics\n")
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try / or /metrics\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:
            log.warning("status page %s failed", url.path, exc_info=True)
            self._send(500, "text/plain; charset=utf-8", f"status page failed: {type(e).__name__}: {e}\n".encode())

    def _send(self, code: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


class ObservabilityHttp:
    """``/metrics`` and the status page on ``host:port`` (0: a free port), in a daemon thread."""

    def __init__(self, host: str, port: int, logins: Logins | None = None,
                 source: status_page.StatusSource | None = None, ssl_context: ssl.SSLContext | None = None):
        self.host, self.requested_port = host, port
        self.logins, self.source, self.ssl_context = logins, source, ssl_context
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._cache: dict[tuple[str, bytes], float] = {}
        self._cache_lock = threading.Lock()
        self._checks = _Budget(HTTP_CONCURRENT_CHECKS, CHECK_WAIT_S)
        self._conns: dict[str, int] = {}
        self._conn_lock = threading.Lock()

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server is not None else self.requested_port

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/"

    def start(self) -> ObservabilityHttp:
        self._server = _Server((self.host, self.requested_port), self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="tierlake-http", daemon=True)
        self._thread.start()
        log.info("status page and /metrics on %s", self.url)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def allowed(self, authorization: str | None) -> bool:
        """Whether a request with this ``Authorization`` header may see the pages."""
        if self.logins is None or not self.logins.enabled:
            return True
        user, password = _basic(authorization)
        if user is None:
            return False  # the browser's first try, before it asks: not a failed login
        key = (user, hashlib.sha256(password.encode()).digest())
        now = time.monotonic()
        with self._cache_lock:
            if self._cache.get(key, 0.0) > now:
                return True
        if self.logins.authenticate(user, password, self._checks) and VIEWER_ROLES & set(self.logins.roles(user)):
            with self._cache_lock:
                self._cache = {k: v for k, v in self._cache.items() if v > now}
                self._cache[key] = now + LOGIN_CACHE_S
            return True
        metrics.auth_failure("http")
        log.warning("status page: login of %r refused", user)
        return False


def _basic(header: str | None) -> tuple[str | None, str]:
    if not header or not header.lower().startswith("basic "):
        return None, ""
    try:
        user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None, ""
    return user, password
