"""Connection-level security of the gateway: TLS with a handshake deadline,
and refusing NOSASL clients at a SASL gateway with an error they can read."""

from __future__ import annotations

import select
import socket
import ssl
import time

from TCLIService import TCLIService, ttypes
from thrift.Thrift import TMessageType

from tierlake.server.exceptions import AuthenticationError
from tierlake.server.gateway.protocol import MessageReader, SocketTransport, encode_reply, error_status

# A refused NOSASL client sends an OpenSession first; it is read (up to this
# size) only to answer it.
REFUSED_MESSAGE_LIMIT = 64 * 1024
NOSASL_REFUSED = ("Authentication required: this gateway accepts SASL PLAIN logins only; connect without "
                  "auth=noSasl (Hive JDBC) or with auth='CUSTOM' and a password (PyHive)")


class TlsError(Exception):
    """The TLS handshake with the client failed."""


def start_tls(sock: socket.socket, context: ssl.SSLContext, deadline: float) -> ssl.SSLSocket:
    """The server side of the TLS handshake, done by ``deadline``
    (``time.monotonic()``) however slowly the client's bytes arrive: the
    handshake runs non-blocking and waits only for what is left."""
    tls = None
    try:
        tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
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

