"""Connection-level security of the gateway: TLS, refusing NOSASL clients
at a SASL gateway with an error they can read, and following each session's
current database (for role checks of unqualified table names)."""

from __future__ import annotations

import re
import socket
import ssl

from TCLIService import TCLIService, ttypes
from thrift.Thrift import TMessageType

from tierlake.server.exceptions import AuthenticationError
from tierlake.server.gateway.protocol import MessageReader, SocketTransport, encode_reply, error_status

# A refused NOSASL client sends an OpenSession first; it is read (up to this
# size) only to answer it.
REFUSED_MESSAGE_LIMIT = 64 * 1024
NOSASL_REFUSED = ("Authentication required: this gateway accepts SASL PLAIN logins only; connect without "
                  "auth=noSasl (Hive JDBC) or with auth='CUSTOM' and a password (PyHive)")
_USE = re.compile(r"^\s*USE\s+(?:NAMESPACE\s+|DATABASE\s+|SCHEMA\s+)?(?:`?spark_catalog`?\.)?`?(\w+)`?\s*;?\s*$",
                  re.IGNORECASE)


class TlsError(Exception):
    """The TLS handshake with the client failed."""


def start_tls(sock: socket.socket, context: ssl.SSLContext, timeout: float) -> ssl.SSLSocket:
    """The server side of the TLS handshake, with a deadline. Runs in the
    connection's own thread: a client that never finishes costs only itself."""
    sock.settimeout(timeout)
    try:
        return context.wrap_socket(sock, server_side=True)
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"{type(exc).__name__}: {exc}") from None


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


def use_target(statement: str) -> str | None:
    """The database a ``USE`` statement switches to, else None."""
    match = _USE.match(statement)
    return match.group(1).lower() if match else None
