"""Thrift plumbing of the gateway: schema-less message framing, the statement
handler interface, and helpers to decode/encode the few intercepted RPCs.

Messages are relayed without knowing their schema: the header is read with
TBinaryProtocol and the body is skipped as a struct while a recording
transport keeps the exact bytes, so RPCs newer than PyHive's stubs
(GetQueryId, SetClientInfo, ...) pass through untouched.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from TCLIService import ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.protocol.TProtocol import TProtocolException
from thrift.Thrift import TMessageType, TType
from thrift.transport.TTransport import TMemoryBuffer, TTransportBase, TTransportException

from tierlake.server.gateway.transport.sasl import BufferedSocketTransport

# Replies of the internal server (result sets) may be big; what clients send
# is bounded separately (Gateway.max_request_size).
DEFAULT_MAX_MESSAGE = 256 * 1024 * 1024
DEFAULT_MAX_REQUEST = 16 * 1024 * 1024
# Deep enough for any HS2 message (TTypeDesc nests a few levels), shallow
# enough that crafted input cannot exhaust the Python stack.
MAX_DEPTH = 64

_I32 = struct.Struct(">i")
_FIXED_WIDTH = {TType.BOOL: 1, TType.BYTE: 1, TType.I16: 2, TType.I32: 4,
                TType.I64: 8, TType.DOUBLE: 8}


# -- handler interface ------------------------------------------------------

@dataclass
class LocalResult:
    """A result set produced by the gateway itself.

    ``columns`` holds ``(name, spark type string)`` pairs ("string", "bigint",
    "int", "double", "boolean", "timestamp", "date", "decimal(p,s)",
    "array<string>", ...); ``rows`` holds tuples of Python values, ``None``
    for SQL NULL. Complex values may be pre-rendered JSON strings.
    """

    columns: list[tuple[str, str]]
    rows: list[tuple] = field(default_factory=list)


@dataclass
class SessionInfo:
    """What the gateway knows about the HS2 session a statement runs in.

    ``user`` is the SASL-authenticated user (PLAIN) or the OpenSession
    username (NOSASL); ``protocol_version`` is the negotiated
    ``TProtocolVersion`` value (0 = V1 ... 9 = V10; PyHive gets 5 = V6, Hive
    JDBC 2.3 gets 9 = V10); ``client_address`` is ``"host:port"``;
    ``database`` the session's current database (OpenSession's
    ``use:database``, then Spark's session's at each authorised statement),
    ``None`` = default. ``role``: the role the authoriser bound the session's
    Spark session to (admin, writer or reader), which statements the gateway
    answers through Spark on its own sessions run as too; ``None`` in
    development mode.
    """

    user: str | None
    session_guid: bytes
    protocol_version: int
    client_address: str
    database: str | None = None  # current database, Spark's, at the last checked statement
    settings: tuple[str, ...] = ()  # the ``set:…`` keys OpenSession carried (hiveconf, system)
    secret: bytes | None = None  # the session handle's secret (finds Spark's session)
    role: str | None = None  # the role Spark checks the session as (AuthzCheck), once bound; None: not bound


class Statement:
    """One client statement as the gateway decides on it, built once and passed on: the text, the
    session, Spark's parse of it, the route that answers it and what that route prepared.

    ``plan``: Spark's parse in the client's own session (``planauth.Plan``: the flattened plan, and
    the Java plan as ``plan.java``). The authoriser makes it; in development mode nothing checks the
    statement, so the first handler that needs the parse makes it through ``parse`` (the same parse
    in the same session) and every later reader gets that one: a statement is parsed at most once.

    ``route``: the name of the handler that answers it (None: relayed to Spark's Thrift server);
    ``prepared``: what that handler decided while routing (a staged INSERT, a DDL command, a setting),
    so execution never decides again; ``role``: a role the route needs beyond what the authoriser
    decided on the plan (tiered DDL acts on the gateway's reading of the text: admin);
    ``request_id``/``request_key``: the session's request id, which this statement used up.
    """

    __slots__ = ("text", "session", "plan", "route", "prepared", "role", "request_id", "request_key",
                 "_parse", "_parsed")

    def __init__(self, text: str, session: SessionInfo, parse: Any = None, plan: Any = None):
        self.text = text
        self.session = session
        self.plan = plan
        self.route: str | None = None
        self.prepared: Any = None
        self.role: str | None = None
        self.request_id: str | None = None
        self.request_key: str | None = None
        self._parse = parse
        self._parsed = plan is not None

    def authorised(self, plan: Any) -> None:
        """The authoriser's parse: the one every handler reads."""
        self.plan, self._parsed = plan, True

    def parsed(self, worth_it: bool = True) -> Any:
        """Spark's parse of the statement: the authoriser's, else made now (once) when ``worth_it``
        (a handler's cheap test of the text that the parse could matter). None when the statement
        does not parse (Spark answers it with its own error when it is relayed) or nothing can parse."""
        if self._parsed or not worth_it or self._parse is None:
            return self.plan
        self._parsed = True
        try:
            self.plan = self._parse(self.text)
        except Exception:  # noqa: BLE001 - relayed: Spark answers with its own parse error
            self.plan = None
        return self.plan

    def __repr__(self) -> str:
        return f"Statement({self.text[:60]!r}, route={self.route})"


@runtime_checkable
class StatementHandler(Protocol):
    """What the gateway asks about each statement it does not refuse (server/gateway/routing/router.py
    is the server's). Called from connection threads, concurrently.

    ``route`` decides, once, whether the gateway answers ``statement`` itself: it sets
    ``statement.route`` (and what the route prepared) and returns True, or returns False to relay it.
    ``execute`` answers a routed statement, reporting user-facing failures by raising
    :class:`server.exceptions.TierlakeError` subclasses (their sqlstate and error_code reach the
    client); any other exception becomes an internal error with SQLSTATE XX000. ``refused``: the
    gateway refused the statement before routing it (its role, size or parse). ``session_closed``:
    the client closed the session.
    """

    def route(self, statement: Statement) -> bool: ...

    def execute(self, statement: Statement) -> LocalResult: ...

    def refused(self, statement: Statement) -> None: ...

    def session_closed(self, guid: bytes) -> None: ...


# -- transports -------------------------------------------------------------

class SocketTransport(BufferedSocketTransport):
    """Plain (NOSASL) transport over a connected socket with buffered reads;
    ``flush`` sends everything written since the previous flush."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._rbuf = b""
        self._rpos = 0
        self._wbuf: list = []
        self._open = True

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

    def read(self, sz: int) -> bytes:
        if self._rpos >= len(self._rbuf):
            chunk = self.sock.recv(min(max(sz, 65536), 1 << 20))
            if not chunk:
                raise TTransportException(TTransportException.END_OF_FILE,
                                          "peer closed the connection")
            self._rbuf, self._rpos = chunk, 0
        end = min(self._rpos + sz, len(self._rbuf))
        data = self._rbuf[self._rpos:end]
        self._rpos = end
        return data

    def flush(self) -> None:
        data = b"".join(self._wbuf)
        self._wbuf = []
        self.sock.sendall(data)


class RecordingTransport(TTransportBase):
    """Read-only wrapper that keeps every byte read since the last ``take``.

    It also buffers: reads pull large chunks from ``inner`` so that the many
    tiny reads of a protocol walk are slices of one buffer. Bytes read ahead
    past the end of a message stay for the next one.
    """

    def __init__(self, inner: TTransportBase, limit: int = DEFAULT_MAX_MESSAGE):
        self.inner = inner
        self.limit = limit
        self._buf = bytearray()
        self._pos = 0

    def isOpen(self) -> bool:
        return self.inner.isOpen()

    def _fill(self, end: int) -> None:
        if end > self.limit:
            raise TTransportException(TTransportException.SIZE_LIMIT,
                                      f"message exceeds {self.limit} bytes")
        while len(self._buf) < end:
            chunk = self.inner.read(max(end - len(self._buf), 65536))
            if not chunk:
                raise TTransportException(TTransportException.END_OF_FILE,
                                          "peer closed the connection")
            self._buf += chunk

    def read(self, sz: int) -> bytes:
        if self._pos >= len(self._buf):
            self._fill(self._pos + 1)
        end = min(self._pos + sz, len(self._buf))
        data = bytes(self._buf[self._pos:end])
        self._pos = end
        return data

    def readAll(self, sz: int) -> bytes:
        end = self._pos + sz
        if end > len(self._buf):
            self._fill(end)
        data = bytes(self._buf[self._pos:end])
        self._pos = end
        return data

    def skip_bytes(self, sz: int) -> None:
        """Like ``readAll`` without copying the data out."""
        end = self._pos + sz
        if end > len(self._buf):
            self._fill(end)
        self._pos = end

    @property
    def size(self) -> int:
        """Bytes of the current message consumed so far."""
        return self._pos

    @property
    def buffered(self) -> int:
        """Bytes received but not yet taken (consumed or read ahead)."""
        return len(self._buf)

    def take(self) -> bytes:
        data = bytes(self._buf[:self._pos])
        del self._buf[:self._pos]
        self._pos = 0
        return data


class _SkippingProtocol(TBinaryProtocol):
    """TBinaryProtocol whose ``skip`` is binary-safe and fast.

    The stock ``skip`` reads STRING fields with ``readString``, which
    UTF-8-decodes them and fails on binary fields (handle guids, TBinaryColumn,
    null bitmaps); it also reads fixed-width list elements one call each.
    """

    def __init__(self, trans, limit: int):
        # strictRead: every HS2 client writes versioned headers, and the
        # unversioned form would read a 2 GB "name" out of random bytes.
        super().__init__(trans, strictRead=True, strictWrite=True,
                         string_length_limit=limit, container_length_limit=limit)

    def skip(self, ttype, max_depth=MAX_DEPTH):
        if max_depth <= 0:
            raise TProtocolException(TProtocolException.DEPTH_LIMIT, "maximum nesting exceeded")
        width = _FIXED_WIDTH.get(ttype)
        if width is not None:
            self.trans.skip_bytes(width)
        elif ttype == TType.STRING:
            size = self.readI32()
            self._check_string_length(size)
            self.trans.skip_bytes(size)
        elif ttype == TType.STRUCT:
            while True:
                ftype = self.readByte()
                if ftype == TType.STOP:
                    break
                self.readI16()
                self.skip(ftype, max_depth - 1)
        elif ttype in (TType.LIST, TType.SET):
            etype, size = self.readListBegin()
            self._skip_many(etype, size, max_depth)
        elif ttype == TType.MAP:
            ktype, vtype, size = self.readMapBegin()
            kwidth, vwidth = _FIXED_WIDTH.get(ktype), _FIXED_WIDTH.get(vtype)
            if kwidth and vwidth:
                self.trans.skip_bytes(size * (kwidth + vwidth))
            else:
                for _ in range(size):
                    self.skip(ktype, max_depth - 1)
                    self.skip(vtype, max_depth - 1)
        else:
            raise TProtocolException(TProtocolException.INVALID_DATA,
                                     f"unknown field type {ttype}")

    def _skip_many(self, etype: int, size: int, max_depth: int) -> None:
        width = _FIXED_WIDTH.get(etype)
        if width is not None:
            self.trans.skip_bytes(size * width)
        elif etype == TType.STRING:
            # The hot path of relaying result sets (TStringColumn values).
            read_all, skip_bytes, unpack = self.trans.readAll, self.trans.skip_bytes, _I32.unpack
            for _ in range(size):
                (length,) = unpack(read_all(4))
                self._check_string_length(length)
                skip_bytes(length)
        else:
            for _ in range(size):
                self.skip(etype, max_depth - 1)


@dataclass
class RawMessage:
    """One complete Thrift message exactly as it arrived on the wire."""

    name: str
    mtype: int
    seqid: int
    data: bytes
    header_len: int

    @property
    def body(self) -> bytes:
        return self.data[self.header_len:]


class MessageReader:
    """Reads whole binary-protocol messages from a transport without a schema."""

    def __init__(self, transport: TTransportBase, max_message_size: int = DEFAULT_MAX_MESSAGE):
        self._rec = RecordingTransport(transport, max_message_size)
        self._proto = _SkippingProtocol(self._rec, max_message_size)

    def read(self) -> RawMessage | None:
        """Return the next message, or ``None`` if the peer closed cleanly
        between messages. A peer vanishing mid-message raises."""
        self._rec.take()
        try:
            name, mtype, seqid = self._proto.readMessageBegin()
        except (TTransportException, EOFError):
            if self._rec.buffered == 0:
                return None
            raise
        header_len = self._rec.size
        self._proto.skip(TType.STRUCT)
        self._proto.readMessageEnd()
        return RawMessage(name, mtype, seqid, self._rec.take(), header_len)


# -- decoding / encoding helpers -------------------------------------------

def _protocol(trans) -> TBinaryProtocol:
    # Not TBinaryProtocolAccelerated: PyHive's stubs come from an old Thrift
    # generator whose thrift_spec layout the C codec rejects.
    return TBinaryProtocol(trans)


def decode_body(msg: RawMessage, struct_cls) -> Any:
    """Decode the message body (args or result struct) with PyHive's stubs."""
    obj = struct_cls()
    obj.read(_protocol(TMemoryBuffer(msg.body)))
    return obj


class _StrictProtocol(TBinaryProtocol):
    """Decoding that refuses what the stubs would silently drop: a field
    with an unknown id or an unexpected type (the stubs ``skip`` those; the
    Java server might not). Strings must be UTF-8 (``readString`` is strict)."""

    def skip(self, ttype):
        raise TProtocolException(TProtocolException.INVALID_DATA, "unknown field or unexpected field type")


def strict_decode(msg: RawMessage, struct_cls) -> Any:
    """Like :func:`decode_body`, but raises on anything the stubs would not
    have understood completely."""
    obj = struct_cls()
    obj.read(_StrictProtocol(TMemoryBuffer(msg.body)))
    return obj


def encode_message(name: str, mtype: int, seqid: int, struct_obj) -> bytes:
    buf = TMemoryBuffer()
    proto = _protocol(buf)
    proto.writeMessageBegin(name, mtype, seqid)
    struct_obj.write(proto)
    proto.writeMessageEnd()
    return buf.getvalue()


def encode_reply(name: str, seqid: int, result_struct) -> bytes:
    """A REPLY message for ``name`` with the request's seqid."""
    return encode_message(name, TMessageType.REPLY, seqid, result_struct)


def ok_status() -> ttypes.TStatus:
    return ttypes.TStatus(statusCode=ttypes.TStatusCode.SUCCESS_STATUS)


def error_status(message: str, sqlstate: str = "XX000", error_code: int = 1000) -> ttypes.TStatus:
    # No infoMessages: Hive JDBC parses them as a serialized Java stack trace
    # and mangles the exception cause when they do not follow that format.
    return ttypes.TStatus(statusCode=ttypes.TStatusCode.ERROR_STATUS,
                          sqlState=sqlstate, errorCode=int(error_code), errorMessage=message)
