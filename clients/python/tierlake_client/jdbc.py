"""Connecting to a gateway given as a JDBC URL (``tierlake sql``, ``tierlake
tiering-service``, :class:`~tierlake_client.procedure_client.Admin`, the
``tierlake://`` dialect).

URL options understood: ``;auth=noSasl`` (raw Thrift) and ``;ssl=true``
(TLS; the server certificate is checked against ``ca_file``, else the system's
trusted CAs). Hive JDBC's ``sslTrustStore`` is a Java key store, which Python
cannot read: give the CA's PEM file instead.
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path
from urllib.parse import urlparse

from tierlake_client.exceptions import ConfigError, TierlakeError

PASSWORD_ENV = "TIERLAKE_PASSWORD"


def parse_jdbc_url(url: str) -> tuple[str, int, str, dict[str, str]]:
    if not url.startswith("jdbc:hive2://"):
        raise TierlakeError(f"expected a jdbc:hive2:// URL, got {url!r}")
    parsed = urlparse(url[len("jdbc:"):])
    path, _, params = parsed.path.partition(";")
    options = dict(p.split("=", 1) for p in params.split(";") if "=" in p)
    return parsed.hostname or "127.0.0.1", parsed.port or 10000, path.strip("/") or "default", options


def resolve_password(password: str | None, password_file: str | None = None) -> str | None:
    """The password given on the command line, else ``$TIERLAKE_PASSWORD``,
    else the first line of ``password_file``; ``None`` when there is none."""
    if password is not None:
        return password
    if os.environ.get(PASSWORD_ENV):
        return os.environ[PASSWORD_ENV]
    if password_file:
        try:
            lines = Path(password_file).expanduser().read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ConfigError(f"cannot read the password from {password_file}: {e.strerror}") from None
        return lines[0] if lines else ""
    return None


def _refused(host: str, port: int) -> bool:
    """Nothing accepts connections at ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=10).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def connect(url: str, user: str, password: str | None = None, ca_file: str | None = None):
    """A PyHive connection to the gateway at ``url``.

    Failures say what went wrong in words (a :class:`TierlakeError`): nothing
    listening at the address, a TLS handshake with a gateway that does not
    speak TLS, a password with ``auth=noSasl`` (which sends none)."""
    from pyhive import hive
    from thrift.transport.TTransport import TTransportException

    host, port, database, options = parse_jdbc_url(url)
    nosasl = options.get("auth", "").lower() == "nosasl"
    if nosasl and password:
        raise ConfigError("auth=noSasl sends no password, but one was given (in the URL or $TIERLAKE_PASSWORD): "
                          "remove it for a gateway with tierlake.gateway.auth=NOSASL, or drop auth=noSasl "
                          "for a gateway that checks passwords")
    if options.get("ssl", "").lower() != "true":
        auth = "NOSASL" if nosasl else "CUSTOM" if password is not None else "NONE"
        try:
            return hive.connect(host=host, port=port, database=database, username=user, password=password,
                                auth=auth)
        except TTransportException as e:
            if "Bad status: 3" in str(e):
                raise  # SASL BAD: the gateway answered and refused the user name or password, as its text says
            if _refused(host, port):
                raise TierlakeError(f"cannot connect to the gateway at {host}:{port}: nothing is listening there "
                                    "(is the server running, and is this its port, tierlake.gateway.port?)") from e
            raise TierlakeError(f"cannot connect to the gateway at {host}:{port}: it closed the connection at "
                                f"login ({e}): a TLS gateway needs ssl=true, a NOSASL gateway auth=noSasl") from e
    from thrift.transport.TSocket import TSocket
    from thrift.transport.TTransport import TBufferedTransport

    context = ssl.create_default_context(cafile=ca_file)
    # The TLS socket is made here rather than by thrift's TSSLSocket, which
    # reports a failed handshake only as "Could not connect".
    try:
        raw = socket.create_connection((host, port), timeout=60)
        handle = context.wrap_socket(raw, server_hostname=host)
    except (OSError, ssl.SSLError) as e:
        hint = ""
        if isinstance(e, ConnectionRefusedError):
            hint = " (nothing is listening there: is the server running, and is this its port?)"
        elif "WRONG_VERSION_NUMBER" in str(e) or "record layer failure" in str(e):
            hint = " (the gateway at this port does not speak TLS: remove ssl=true, or set " \
                   "tierlake.gateway.ssl.certfile on the server)"
        raise TierlakeError(f"TLS connection to {host}:{port} failed: {e}{hint}") from e
    handle.settimeout(None)
    sock = TSocket(host, port)
    sock.handle = handle
    if nosasl:
        transport = TBufferedTransport(sock)
        transport.open = lambda: None  # the socket is open already
    else:
        import thrift_sasl
        from pyhive.sasl_compat import PureSASLClient

        transport = thrift_sasl.TSaslClientTransport(
            lambda: PureSASLClient(host, username=user, password=password if password is not None else "x"),
            "PLAIN", sock)
    return hive.connect(thrift_transport=transport, username=user, database=database)
