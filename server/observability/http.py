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


class Logins(Protocol):
    """What the gateway's authoriser offers (``server/gateway/auth/authz.Authorizer``)."""

    @property
    def enabled(self) -> bool: ...

    def authenticate(self, user: str, password: str) -> bool: ...

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
        if not owner.allowed(self.headers.get("Authorization")):
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
        if self.logins.authenticate(user, password) and VIEWER_ROLES & set(self.logins.roles(user)):
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
