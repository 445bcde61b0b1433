"""The HiveServer2 gateway: a Thrift relay in front of the in-process Spark
Thrift Server that answers some statements (``CALL sys....``) itself.

Every client connection gets its own thread and its own connection to the
internal STS (SASL PLAIN with the process's secret: only the gateway gets
in). Messages are relayed byte-for-byte. With a password file, every
request is first decoded strictly by the stubs (refused when they cannot:
bad UTF-8, unknown fields, a message type other than CALL), OpenSession's
configuration is checked against an allow-list (auth/requestcheck.py) and every
statement is authorised on Spark's parse (auth/authz.py, auth/planauth.py).

Connection slots come in two pools (security.Admission): connections still in
their TLS/SASL handshake cannot take the slots of those that logged in, and a
full handshake pool evicts its oldest member rather than turning away the
newcomer. Every handle a request names must be the connection's own: a
session opened on it, an operation made in one of those sessions; Spark's
session manager serves any handle it knows to any connection, so a foreign
one is refused here and never relayed.
"""

from __future__ import annotations

import dataclasses
import logging
import selectors
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from TCLIService import TCLIService, ttypes
from thrift.Thrift import TApplicationException, TMessageType

from tierlake.server.config import settings
from tierlake.server.exceptions import InvalidHandleError, ResultTooLargeError, ServerStoppingError, TierlakeError
from tierlake.server.gateway.auth.requestcheck import (
    NAMES_NO_HANDLE,
    SESSION,
    check_configuration,
    check_overlay,
    named_handle,
)
from tierlake.server.gateway.results import build_row_set, empty_log_row_set, parse_columns, table_schema
from tierlake.server.gateway.transport import errors, rawmethods
from tierlake.server.gateway.transport.liveness import PeerWatch
from tierlake.server.gateway.transport.protocol import (
    DEFAULT_MAX_MESSAGE,
    DEFAULT_MAX_REQUEST,
    LocalResult,
    MessageReader,
    RawMessage,
    SessionInfo,
    SocketTransport,
    StatementHandler,
    decode_body,
    encode_message,
    encode_reply,
    error_status,
    ok_status,
    strict_decode,
)
from tierlake.server.gateway.transport.sasl import Authenticator, NotSaslClient, SaslError, SaslServerTransport
from tierlake.server.gateway.transport.security import Admission, TlsError, refuse_nosasl, start_tls
from tierlake.server.gateway.transport.upstream import UpstreamError, connect_upstream
from tierlake.server.observability import metrics
from tierlake.server.runtime.operations import OperationControl, running
from tierlake.server.sqlapi import roles as R

log = logging.getLogger("tierlake.gateway")

# Clients asking for maxRows <= 0 would otherwise get empty batches, which
# both PyHive and Hive JDBC read as end-of-data.
DEFAULT_FETCH_SIZE = 1000
LOG_FETCH = 1  # TFetchResultsReq.fetchType: 0 = result rows, 1 = operation log
# An asynchronous local statement that ends within this grace is answered like
# a synchronous one, so quick CALLs keep reporting errors in the
# ExecuteStatement reply itself; only long ones are polled.
ASYNC_GRACE_S = 1.0
# GetOperationStatus on a running local statement waits this long for it to
# end (long polling, as Spark's Thrift Server does).
STATUS_LONG_POLL_S = 1.0
# What a stopping gateway refuses (new work); everything else — status polls, fetches, closes —
# is served so that statements already running are answered.
STARTS_WORK = frozenset({"ExecuteStatement", "OpenSession", "GetTypeInfo", "GetCatalogs", "GetSchemas", "GetTables",
                         "GetTableTypes", "GetColumns", "GetFunctions", "GetPrimaryKeys", "GetCrossReference"})
# The methods whose reply carries a new operation's handle (ExecuteStatement and the metadata
# calls), read off the stubs so that none is forgotten.
MAKES_OPERATION = frozenset(
    name for name in dir(TCLIService.Iface) if not name.startswith("_")
    and any(spec is not None and spec[2] == "operationHandle"
            for spec in getattr(ttypes, f"T{name}Resp").thrift_spec if spec))
# A burst of connections (a flood, or clients reconnecting together) waits in the kernel's queue
# while the accept loop catches up; with a short queue the kernel drops SYNs and a client's
# connect stalls for its one-second retransmit, a login included.
LISTEN_BACKLOG = 1024
# At most one warning this often about evicted handshakes: a flood must not flood the log too.
EVICTION_LOG_INTERVAL_S = 10.0
# Replies that carry a statement's error (reworded by _readable_error).
_READABLE_ERRORS = frozenset({"ExecuteStatement", "GetOperationStatus"})
_TERMINAL = frozenset({ttypes.TOperationState.FINISHED_STATE, ttypes.TOperationState.ERROR_STATE,
                       ttypes.TOperationState.CANCELED_STATE, ttypes.TOperationState.CLOSED_STATE,
                       ttypes.TOperationState.TIMEDOUT_STATE})


class _BackendError(Exception):
    """The link to the internal STS failed; the client connection must go."""


class _NoSlot(Exception):
    """The connection logged in (or needs no login) but gets no authenticated slot."""


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _LocalOperation:
    guid: bytes
    session_guid: bytes
    protocol_version: int
    started_ms: int
    control: OperationControl
    done: threading.Event
    secret: bytes = b""  # the handle's secret: a guid alone does not make a handle the caller's
    result: LocalResult | None = None
    failure: ttypes.TStatus | None = None
    completed_ms: int = 0
    cursor: int = 0
    reported: bool = False  # the client has seen how it ended (a stopping gateway waits for that)

    @property
    def state(self) -> int:
        S = ttypes.TOperationState
        if not self.done.is_set():
            return S.CANCELED_STATE if self.control.cancelled else S.RUNNING_STATE
        if self.failure is not None:
            return S.CANCELED_STATE if self.control.cancelled else S.ERROR_STATE
        return S.FINISHED_STATE


class _Connection:
    """One client connection, its backend link, its sessions and local operations."""

    def __init__(self, gateway: Gateway, sock: socket.socket, address):
        self.gateway = gateway
        self.sock = sock
        self.address = f"{address[0]}:{address[1]}"
        self.user: str | None = None
        self.deadline = time.monotonic() + gateway.handshake_timeout  # of the handshakes; set at accept
        self.client = None
        self.backend: SocketTransport | None = None
        self.sessions: dict[bytes, SessionInfo] = {}
        self.operations: dict[bytes, _LocalOperation] = {}
        self._closing = False
        self._close_after_reply = False
        self._handling = False  # a request read and not answered yet
        # Statements the backend runs, by operation guid → session guid, until the client saw them end.
        self.relayed: dict[bytes, bytes] = {}
        # Every operation the backend made in this connection's sessions (ExecuteStatement and the
        # metadata calls), by guid → (secret, session guid), until closed: the handles this
        # connection may name. Unlike ``relayed`` it keeps finished operations (their rows are fetched).
        self.owned: dict[bytes, tuple[bytes, bytes]] = {}
        self._intercepts: dict[str, Callable[[RawMessage], bytes | None]] = {
            "OpenSession": self._open_session,
            "CloseSession": self._close_session,
            "ExecuteStatement": self._execute_statement,
            "GetOperationStatus": self._get_operation_status,
            "GetResultSetMetadata": self._get_result_set_metadata,
            "FetchResults": self._fetch_results,
            "CloseOperation": self._close_operation,
            "CancelOperation": self._cancel_operation,
            "GetLog": self._get_log,
            # Spark only logs what a SetClientInfo carries (rawmethods.py): no client text for its log.
            "SetClientInfo": lambda msg: rawmethods.set_client_info_reply(msg.seqid) if self._checked else None,
        }

    # -- lifecycle --------------------------------------------------------
    def run(self) -> None:
        try:
            self._setup()
            self._serve()
        except SaslError as exc:
            if not self._closing:  # evicted: the accept loop logs evictions in bulk, a flood of them
                log.warning("SASL negotiation with %s failed: %s", self.address, exc)
        except TlsError as exc:
            if not self._closing:
                log.warning("TLS handshake with %s failed: %s", self.address, exc)
        except _NoSlot as exc:
            log.warning("refused %s: %s", self.address, exc)
        except _BackendError as exc:
            if not self._closing:
                log.error("backend link of %s failed: %s", self.address, exc)
        except (ConnectionResetError, BrokenPipeError) as exc:
            if not self._closing:
                log.info("client %s went away: %s", self.address, exc)
        except Exception as exc:  # malformed input must only cost this connection
            if not self._closing:
                log.warning("closing connection from %s: %s",
                            self.address, _describe(exc))
                log.debug("connection %s failure", self.address, exc_info=True)
        finally:
            self.close()
            self.gateway._forget(self)

    def _setup(self) -> None:
        gw = self.gateway
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # One deadline for TLS and SASL together, however slowly bytes arrive, counted from
        # the accept: the time spent in the waiting room is part of it.
        deadline = self.deadline
        if gw.ssl_context is not None:
            self.sock = start_tls(self.sock, gw.ssl_context, deadline, on_wrapped=self._wrapped)
        self.sock.settimeout(None)
        if gw.auth == "PLAIN":
            transport = SaslServerTransport(self.sock, gw.authenticator, gw.max_request_size,
                                            gw.handshake_timeout)
            self.client = transport
            try:
                self.user = transport.handshake(deadline, admit=self._admit)
            except NotSaslClient as exc:
                try:
                    refuse_nosasl(self.sock, exc.prefix, max(0.1, deadline - time.monotonic()))
                except Exception as refusal:  # noqa: BLE001 - garbage that merely starts like Thrift
                    log.debug("cannot answer the NOSASL client %s: %s", self.address, _describe(refusal))
                raise
        else:
            refusal = self._admit(None)  # NOSASL: nobody to authenticate, the slot is taken now
            if refusal is not None:
                raise _NoSlot(refusal)
            self.client = SocketTransport(self.sock)
        try:
            self.backend = connect_upstream(gw.backend_host, gw.backend_port, self.user, gw.backend_secret,
                                            gw.connect_timeout, gw.max_message_size)
        except (OSError, UpstreamError) as exc:
            raise _BackendError(f"cannot connect to {gw.backend_host}:{gw.backend_port}: {exc}") from None
        if self._closing:  # stop() ran while we were connecting
            self.close()
            raise _BackendError("gateway stopping")
        self._backend_reader = MessageReader(self.backend, gw.max_message_size)
        self._client_reader = MessageReader(self.client, gw.max_request_size)
        log.debug("connection from %s (user %r) ready", self.address, self.user)

    def _wrapped(self, tls: ssl.SSLSocket) -> None:
        """start_tls made the TLS socket: from now on evict() must shut down that one."""
        self.sock = tls
        if self._closing:  # evicted while the socket was being wrapped
            raise TlsError("connection closed during the TLS handshake")

    def _admit(self, user: str | None) -> str | None:
        """The handshake succeeded: take an authenticated slot (None), or say why there is none.
        Runs before the client hears of its login and before the backend link, the expensive
        part, is made."""
        # A refusal is logged where the handshake fails (SaslError, _NoSlot); evictions in bulk by the accept loop.
        return self.gateway._admission.promote(self)

    def _serve(self) -> None:
        while True:
            msg = self._client_reader.read()
            if msg is None:
                log.debug("client %s disconnected", self.address)
                return
            self._handling = True
            try:
                reply = self._handle(msg)
                if reply is not None:
                    self.client.write(reply)
                    self.client.flush()
            finally:
                self._handling = False
            if self._close_after_reply:
                return

    def quiet(self) -> bool:
        """Nothing in flight: no request being answered, no statement whose end the client has not seen."""
        return (not self._handling and not self.relayed
                and all(op.reported for op in list(self.operations.values())))

    def evict(self) -> None:
        """Make the connection's own thread end it, from another thread (the accept loop).

        Only a shutdown: a blocked recv returns at once and every later one reads end-of-file,
        and the thread closes the socket on its way out (run's finally). Closing it here
        would free its descriptor while that thread may be about to read it: the next
        accepted socket gets the same number, and the evicted thread would go on reading
        the newcomer's bytes."""
        self._closing = True
        for sock in (self.sock, self.backend.sock if self.backend else None):
            if sock is None:
                continue
            try:
                # socket.socket's own shutdown, also for a TLS socket: SSLSocket.shutdown would
                # drop its SSL object under the thread that is in the middle of the handshake.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Close both sockets and forget local state. Safe from any thread and
        more than once (stop() may race with the connection's own exit)."""
        self._closing = True
        for sock in (self.sock, self.backend.sock if self.backend else None):
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        # A client that went away cannot see its statements end: cancel them.
        for op in list(self.operations.values()):
            if not op.done.is_set():
                op.control.cancel()
        self.operations.clear()
        self.sessions.clear()

    # -- dispatch ---------------------------------------------------------
    @property
    def _checked(self) -> bool:
        authorizer = self.gateway.authorizer
        return authorizer is not None and authorizer.enabled

    def _refuse_unchecked(self, msg: RawMessage) -> bytes | None:
        """The reply refusing a request the gateway cannot check, or None."""
        if msg.mtype != TMessageType.CALL:
            # libthrift on the Spark side dispatches by name whatever the
            # type says; nothing but a CALL may pass. No answer fits: close.
            log.warning("closing connection from %s: Thrift message type %d (%s), not CALL",
                        self.address, msg.mtype, msg.name)
            self._close_after_reply = True
            return self._application_error(msg, TApplicationException.INVALID_MESSAGE_TYPE,
                                           "only Thrift CALL messages are accepted")
        args_cls = getattr(TCLIService, f"{msg.name}_args", None) or rawmethods.ARGS.get(msg.name)
        if args_cls is None:
            return self._application_error(msg, TApplicationException.UNKNOWN_METHOD,
                                           f"unknown or unsupported method {msg.name}")
        try:
            strict_decode(msg, args_cls)
        except Exception as exc:  # noqa: BLE001 - any failure means: not checkable
            log.warning("refused an undecodable %s from %s: %s", msg.name, self.address, _describe(exc))
            refusal = f"request refused: the gateway cannot decode this {msg.name} request ({_describe(exc)})"
            if msg.name in rawmethods.ARGS:  # the stubs have no response struct to carry a SQL error
                return self._application_error(msg, TApplicationException.PROTOCOL_ERROR, refusal)
            return self._error_reply(msg, refusal, "08P01")
        return None

    def _refuse_foreign_handle(self, msg: RawMessage) -> bytes | None:
        """The reply refusing a request whose handle is not this connection's own, or None.

        Spark's session manager is shared by all connections and serves any handle it knows,
        whoever sends it: relayed, another client's handle would fetch its rows, cancel or close
        its statements, run statements in its session (as its user: Spark's session is the
        other user's). So the handle must name a session opened on this connection or an
        operation made in one of them, guid and secret both. Deny by default: a request the
        gateway cannot read the handle of is refused too, in development mode as well.
        """
        if msg.name in NAMES_NO_HANDLE or msg.mtype != TMessageType.CALL:
            return None
        args_cls = getattr(TCLIService, f"{msg.name}_args", None) or rawmethods.ARGS.get(msg.name)
        if args_cls is None:
            return None  # unknown method: refused by _refuse_unchecked with a password file
        try:
            args = decode_body(msg, args_cls)
            named = named_handle(args)
        except Exception as exc:  # noqa: BLE001 - unreadable: cannot be shown to be ours
            return self._refuse_handle(msg, InvalidHandleError(
                f"request refused: the gateway cannot read the handle of this {msg.name} request "
                f"({_describe(exc)})"))
        kind, handle = named if named is not None else (SESSION, None)
        if handle is None or not isinstance(handle.guid, bytes):
            if not self._checked:
                return None  # names nothing to take over; the backend refuses it as before
            return self._refuse_handle(msg, InvalidHandleError(
                f"Invalid {kind}: the {msg.name} request names none"))
        if kind == SESSION:
            session = self.sessions.get(handle.guid)
            ours = session is not None and session.secret == handle.secret
        else:
            local = self.operations.get(handle.guid)
            relayed = self.owned.get(handle.guid)
            ours = ((local is not None and local.secret == handle.secret)
                    or (relayed is not None and relayed[0] == handle.secret))
        if ours:
            return None
        log.warning("refused %s from %s (user %r): its %s is not one of this connection's",
                    msg.name, self.address, self.user, kind)
        return self._refuse_handle(msg, InvalidHandleError(
            f"Invalid {kind}: not {'a session' if kind == SESSION else 'an operation'} of this connection "
            "(unknown, closed, or opened by another client)"))

    def _refuse_handle(self, msg: RawMessage, error: InvalidHandleError) -> bytes:
        if msg.name == "SetClientInfo":
            return rawmethods.set_client_info_reply(
                msg.seqid, error_status(error.message, error.sqlstate, error.error_code))
        if msg.name in rawmethods.ARGS:  # GetQueryId's reply has no status: only an exception can say no
            return self._application_error(msg, TApplicationException.INTERNAL_ERROR, error.message)
        return self._error_reply(msg, error.message, error.sqlstate, error.error_code)

    def _application_error(self, msg: RawMessage, kind: int, message: str) -> bytes:
        return encode_message(msg.name or "unknown", TMessageType.EXCEPTION, msg.seqid,
                              TApplicationException(kind, message))

    def _handle(self, msg: RawMessage) -> bytes | None:
        if self._checked or msg.mtype != TMessageType.CALL:
            refusal = self._refuse_unchecked(msg)
            if refusal is not None:
                return refusal
        refusal = self._refuse_foreign_handle(msg)
        if refusal is not None:
            return refusal
        if self.gateway.draining and msg.name in STARTS_WORK:
            refusal = ServerStoppingError("tierlake is stopping: this request was not run; send it again once "
                                          "the server is back")
            if msg.name in rawmethods.ARGS:
                return self._application_error(msg, TApplicationException.INTERNAL_ERROR, refusal.message)
            return self._error_reply(msg, refusal.message, refusal.sqlstate, refusal.error_code)
        intercept = self._intercepts.get(msg.name)
        if intercept is not None:
            try:
                reply = intercept(msg)
            except _BackendError:
                raise
            except Exception as exc:
                log.exception("gateway failed to answer %s from %s", msg.name, self.address)
                return self._error_reply(msg, f"Internal gateway error: {_describe(exc)}")
            if reply is not None:
                return reply
        reply_msg = self._relay(msg)
        if reply_msg is not None:
            if msg.name == "FetchResults" and len(reply_msg.data) > self.gateway.max_reply_size:
                # One huge value (SELECT repeat(…)) would otherwise end a Java client's connection
                # ("Length exceeded max allowed: 16384000") with nothing said of why.
                error = ResultTooLargeError(
                    f"result too large: this fetch is {len(reply_msg.data)} bytes, more than "
                    f"tierlake.gateway.max-reply-size ({self.gateway.max_reply_size} bytes); fetch fewer rows "
                    "at a time, or select smaller values (a single value this large cannot be sent)")
                return self._error_reply(msg, error.message, error.sqlstate, error.error_code)
            self._track_relayed(msg, reply_msg)
            if (msg.name in _READABLE_ERRORS and reply_msg.mtype == TMessageType.REPLY
                    and (b"[" in reply_msg.data or b"SecurityException" in reply_msg.data
                         or b"java.lang.ThreadDeath" in reply_msg.data)):
                return self._readable_error(msg, reply_msg)
        return reply_msg.data if reply_msg is not None else None

    def _readable_error(self, msg: RawMessage, reply: RawMessage) -> bytes:
        """The backend's reply, with Spark's analysis or parse error as one short line with its
        SQLSTATE and tierlake's error code (transport/errors.py); any other reply as it came."""
        try:
            result = decode_body(reply, getattr(TCLIService, f"{msg.name}_result"))
            response = result.success
            carrier = response.status if msg.name == "ExecuteStatement" else response
            if carrier is None or not carrier.errorMessage:
                return reply.data
            readable = errors.readable(carrier.errorMessage, carrier.sqlState, carrier.errorCode)
            if readable is None:
                return reply.data
            log.debug("relayed error for %s, as Spark sent it: %s", self.address, carrier.errorMessage)
            carrier.errorMessage, carrier.sqlState, carrier.errorCode = readable
            if msg.name == "ExecuteStatement":
                carrier.infoMessages = None  # Spark's stack, line by line
            return encode_reply(msg.name, msg.seqid, result)
        except Exception:  # never lose the reply over its wording
            log.debug("cannot reword the reply to %s of %s", msg.name, self.address, exc_info=True)
            return reply.data

    def _track_relayed(self, msg: RawMessage, reply: RawMessage) -> None:
        """Remember the backend's statements until the client saw them end (a stopping gateway waits),
        and every operation handle it made for this connection until it is closed (the handles
        this connection may name)."""
        if reply.mtype != TMessageType.REPLY:
            return
        try:
            self._track_owned(msg, reply)
        except Exception:
            log.debug("cannot track the operations of %s of %s", msg.name, self.address, exc_info=True)
        try:
            if msg.name == "ExecuteStatement":
                request = decode_body(msg, TCLIService.ExecuteStatement_args).req
                response = decode_body(reply, TCLIService.ExecuteStatement_result).success
                # Its outcome as the reply says (an asynchronous statement's later failure is Spark's to count).
                metrics.statement("relayed", "error" if response is None or response.status.statusCode
                                  == ttypes.TStatusCode.ERROR_STATUS else "ok")
                if response is not None and response.operationHandle is not None:
                    self.relayed[response.operationHandle.operationId.guid] = request.sessionHandle.sessionId.guid
            elif self.relayed and msg.name in ("GetOperationStatus", "CloseOperation", "CancelOperation"):
                request = decode_body(msg, getattr(TCLIService, f"{msg.name}_args")).req
                guid = request.operationHandle.operationId.guid
                if guid in self.relayed and msg.name == "GetOperationStatus":
                    response = decode_body(reply, TCLIService.GetOperationStatus_result).success
                    if response is None or response.operationState not in _TERMINAL:
                        return
                self.relayed.pop(guid, None)
        except Exception:
            log.debug("cannot track %s of %s", msg.name, self.address, exc_info=True)

    def _track_owned(self, msg: RawMessage, reply: RawMessage) -> None:
        if msg.name not in MAKES_OPERATION and msg.name != "CloseOperation":
            return  # above all not FetchResults: decoding its rows again would double its cost
        response = decode_body(reply, getattr(TCLIService, f"{msg.name}_result")).success
        status = getattr(response, "status", None)
        if status is None or status.statusCode not in (ttypes.TStatusCode.SUCCESS_STATUS,
                                                      ttypes.TStatusCode.SUCCESS_WITH_INFO_STATUS):
            return
        request = decode_body(msg, getattr(TCLIService, f"{msg.name}_args")).req
        made = getattr(response, "operationHandle", None)
        session = getattr(request, "sessionHandle", None)
        if made is not None and session is not None:  # ExecuteStatement, GetTables, GetColumns, …
            self.owned[made.operationId.guid] = (made.operationId.secret, session.sessionId.guid)
        elif msg.name == "CloseOperation":
            self.owned.pop(request.operationHandle.operationId.guid, None)

    def _relay(self, msg: RawMessage) -> RawMessage | None:
        try:
            self.backend.write(msg.data)
            self.backend.flush()
            if msg.mtype == TMessageType.ONEWAY:
                return None
            reply = self._backend_reader.read()
        except Exception as exc:
            raise _BackendError(_describe(exc)) from exc
        if reply is None:
            raise _BackendError("the Spark Thrift Server closed the connection")
        return reply

    @staticmethod
    def _reply(msg: RawMessage, response) -> bytes:
        result = getattr(TCLIService, f"{msg.name}_result")(success=response)
        return encode_reply(msg.name, msg.seqid, result)

    def _error_reply(self, msg: RawMessage, message: str, sqlstate: str = "XX000",
                     error_code: int = 1000) -> bytes:
        response = getattr(ttypes, f"T{msg.name}Resp")(
            status=error_status(message, sqlstate, error_code))
        return self._reply(msg, response)

    def _local_operation(self, msg: RawMessage):
        """(request, operation) when ``msg`` targets a gateway-owned handle."""
        if not self.operations:
            return None, None
        try:
            request = decode_body(msg, getattr(TCLIService, f"{msg.name}_args")).req
            guid = request.operationHandle.operationId.guid
        except Exception:  # noqa: BLE001 - not decodable by the stubs: the backend decides
            return None, None
        return request, self.operations.get(guid)

    # -- sessions -----------------------------------------------------------
    def _open_session(self, msg: RawMessage) -> bytes:
        request = None
        try:
            args = decode_body(msg, TCLIService.OpenSession_args)
            request = args.req
        except Exception:
            log.debug("undecodable OpenSession from %s", self.address, exc_info=True)
        if self._checked:
            try:
                check_configuration(getattr(request, "configuration", None) or {})
            except TierlakeError as exc:
                log.warning("refused OpenSession from %s: %s", self.address, exc.message)
                return self._error_reply(msg, exc.message, exc.sqlstate, exc.error_code)
        if request is not None and self.user is not None and request.username != self.user:
            # The internal STS is NOSASL and believes the username in the
            # request; make it the one that passed authentication.
            request.username = self.user
            data = encode_message(msg.name, msg.mtype, msg.seqid, args)
            msg = RawMessage(msg.name, msg.mtype, msg.seqid, data, 0)
        reply = self._relay(msg)
        if reply.mtype != TMessageType.REPLY:
            return reply.data  # a TApplicationException: nothing to remember
        try:
            # Decoded from a copy; the client gets the backend's bytes.
            response = decode_body(reply, TCLIService.OpenSession_result).success
            if (response is not None and response.sessionHandle is not None
                    and response.status.statusCode in (ttypes.TStatusCode.SUCCESS_STATUS,
                                                        ttypes.TStatusCode.SUCCESS_WITH_INFO_STATUS)):
                guid = response.sessionHandle.sessionId.guid
                user = self.user if self.user is not None else getattr(request, "username", None)
                configuration = getattr(request, "configuration", None) or {}
                database = configuration.get("use:database")
                self.sessions[guid] = SessionInfo(user, guid, response.serverProtocolVersion,
                                                  self.address,
                                                  database.lower() if isinstance(database, str) else None,
                                                  settings=tuple(str(k) for k in configuration
                                                                 if str(k).startswith("set:")),
                                                  secret=response.sessionHandle.sessionId.secret)
                log.debug("session opened for %r from %s (protocol V%d)", user, self.address,
                          response.serverProtocolVersion + 1)
                self.gateway.session_opened(guid, response.sessionHandle.sessionId.secret)
        except Exception:
            log.debug("undecodable OpenSession reply for %s", self.address, exc_info=True)
        return reply.data

    def _close_session(self, msg: RawMessage) -> bytes:
        guid = None
        try:
            guid = decode_body(msg, TCLIService.CloseSession_args).req.sessionHandle.sessionId.guid
        except Exception:
            log.debug("undecodable CloseSession from %s", self.address, exc_info=True)
        reply = self._relay(msg)
        if guid is not None:
            self.sessions.pop(guid, None)
            closed = getattr(self.gateway.handler, "session_closed", None)
            if closed is not None:
                closed(guid)
            sessions = getattr(self.gateway.authorizer, "sessions", None)
            if sessions is not None:
                sessions.forget(guid)
            for op_guid in [g for g, op in self.operations.items() if op.session_guid == guid]:
                self.operations.pop(op_guid).control.cancel()
            for op_guid in [g for g, s in self.relayed.items() if s == guid]:
                self.relayed.pop(op_guid, None)
            for op_guid in [g for g, (_, s) in self.owned.items() if s == guid]:
                self.owned.pop(op_guid, None)
        return reply.data

    # -- local statements ---------------------------------------------------
    def _execute_statement(self, msg: RawMessage) -> bytes | None:
        try:
            request = decode_body(msg, TCLIService.ExecuteStatement_args).req
            statement = request.statement
            session = self.sessions.get(request.sessionHandle.sessionId.guid)
        except Exception:  # noqa: BLE001 - an undecodable request is the backend's to answer
            if self._checked:  # (already refused by the strict decoding; never relay it unchecked)
                return self._error_reply(msg, "request refused: the gateway cannot decode it", "08P01")
            return None
        authorizer = self.gateway.authorizer
        if not isinstance(statement, str):
            if self._checked:
                return self._error_reply(msg, "request refused: ExecuteStatement without a statement", "08P01")
            return None
        if session is None:
            # _refuse_foreign_handle let no such request through; unchecked statements must never
            # reach the backend whatever changes there.
            error = InvalidHandleError("Invalid SessionHandle: unknown to the gateway")
            return self._error_reply(msg, error.message, error.sqlstate, error.error_code)
        if authorizer is not None:
            try:
                if self._checked:
                    check_overlay(request.confOverlay or {})
                authorizer.check(session.user, statement, session)
            except TierlakeError as exc:
                metrics.statement("unrouted", "denied")
                refused = getattr(self.gateway.handler, "statement_refused", None)
                if refused is not None:  # a refused statement is a statement: it uses up the request id
                    refused(session)
                # Spark's parse error (with a password file the gateway parses first): one line, as relayed.
                message, state, code = (errors.readable(exc.message, exc.sqlstate, exc.error_code)
                                        or (exc.message, exc.sqlstate, exc.error_code))
                return self._error_reply(msg, message, state, code)
            except Exception as exc:
                log.exception("authorizer failed for %r", statement[:200])
                return self._error_reply(msg, f"permission denied: the statement could not be checked "
                                              f"({_describe(exc)})", "42501", 2008)
        try:
            # A handler that needs the session (the sys read cache) decides with it.
            wants_for = getattr(self.gateway.handler, "wants_for", None)
            wanted = wants_for(statement, session) if wants_for else self.gateway.handler.wants(statement)
        except Exception as exc:
            log.exception("handler.wants failed for %r", statement[:200])
            return self._error_reply(msg, f"Internal error: {_describe(exc)}")
        if not wanted:
            return None
        if authorizer is not None and authorizer.enabled:
            # DDL the gateway runs itself acts on its own reading of the text
            # (its columns and properties): admin only, whatever Spark's parse
            # in the client's session said.
            runs_ddl = getattr(self.gateway.handler, "runs_ddl", None)
            try:
                if runs_ddl is not None and runs_ddl(statement):
                    authorizer.check_role(session.user, R.ADMIN, "this DDL of a tiered table")
            except TierlakeError as exc:
                metrics.statement("local", "denied")
                return self._error_reply(msg, exc.message, exc.sqlstate, exc.error_code)
        return self._reply(msg, self._run_local(statement, session, bool(request.runAsync),
                                                int(request.queryTimeout or 0)))

    def _run_local(self, statement: str, session: SessionInfo,
                   run_async: bool = False, timeout_s: int = 0) -> ttypes.TExecuteStatementResp:
        guid, secret = uuid.uuid4().bytes, uuid.uuid4().bytes
        op = _LocalOperation(guid, session.session_guid, session.protocol_version, _now_ms(),
                             OperationControl(f"{statement[:80]!r} from {self.address}", max(0, timeout_s)),
                             threading.Event(), secret=secret)
        if run_async:
            self.operations[guid] = op
            threading.Thread(target=self._execute_local, args=(op, statement, session), daemon=True,
                             name=f"tierlake-statement-{guid.hex()[:8]}").start()
            op.done.wait(ASYNC_GRACE_S)
        else:
            # This thread reads nothing until the statement ends: a client that goes away
            # meanwhile is noticed by the peer watch, which cancels the statement (liveness.py).
            token = self.gateway.peer_watch.watch(self.sock, op.control)
            try:
                self._execute_local(op, statement, session)
            finally:
                self.gateway.peer_watch.unwatch(token)
        if op.done.is_set() and op.failure is not None:
            self.operations.pop(guid, None)
            return ttypes.TExecuteStatementResp(status=op.failure)
        op.reported = not run_async  # a synchronous statement's reply is its outcome
        self.operations[guid] = op
        handle = ttypes.TOperationHandle(
            operationId=ttypes.THandleIdentifier(guid=guid, secret=secret),
            operationType=ttypes.TOperationType.EXECUTE_STATEMENT, hasResultSet=True)
        return ttypes.TExecuteStatementResp(status=ok_status(), operationHandle=handle)

    def _execute_local(self, op: _LocalOperation, statement: str, session: SessionInfo) -> None:
        try:
            with running(op.control):
                result = self.gateway.handler.execute(statement, session)
            if not isinstance(result, LocalResult):
                raise TypeError(f"handler returned {type(result).__name__}, not LocalResult")
            parse_columns(result.columns)  # unsupported types fail the statement, not a fetch
            op.result = dataclasses.replace(result, columns=list(result.columns), rows=list(result.rows))
            log.debug("local statement from %s returned %d rows", self.address, len(op.result.rows))
        except TierlakeError as exc:
            log.info("local statement failed (%s): %s", exc.sqlstate, exc.message)
            # A statement the gateway answered through Spark (a sys read) fails in Spark's words: made
            # readable as a relayed one is; a CALL's own error as the CALL's.
            readable = errors.readable(exc.message, exc.sqlstate, exc.error_code)
            message, state, code = readable or (errors.readable_call_error(statement, exc.message), exc.sqlstate,
                                                exc.error_code)
            op.failure = error_status(message, state, code)
        except Exception as exc:
            log.exception("local statement %r failed", statement[:200])
            op.failure = error_status(f"Internal error: {_describe(exc)}")
        finally:
            op.completed_ms = _now_ms()
            metrics.statement("local", "ok" if op.failure is None else "error")
            op.done.set()

    def _not_finished(self, msg: RawMessage, op: _LocalOperation) -> bytes | None:
        if op.state == ttypes.TOperationState.FINISHED_STATE:
            return None
        name = ttypes.TOperationState._VALUES_TO_NAMES.get(op.state, op.state)
        return self._error_reply(msg, f"Expected state FINISHED, but found {name}", "HY010", 1000)

    def _get_operation_status(self, msg: RawMessage) -> bytes | None:
        _, op = self._local_operation(msg)
        if op is None:
            return None
        op.done.wait(STATUS_LONG_POLL_S)
        state = op.state
        if state in _TERMINAL:
            op.reported = True
        response = ttypes.TGetOperationStatusResp(
            status=ok_status(), operationState=state, hasResultSet=op.failure is None,
            operationStarted=op.started_ms, operationCompleted=op.completed_ms or None)
        if op.failure is not None:
            response.sqlState = op.failure.sqlState
            response.errorCode = op.failure.errorCode
            response.errorMessage = op.failure.errorMessage
        return self._reply(msg, response)

    def _get_result_set_metadata(self, msg: RawMessage) -> bytes | None:
        _, op = self._local_operation(msg)
        if op is None:
            return None
        pending = self._not_finished(msg, op)
        if pending is not None:
            return pending
        return self._reply(msg, ttypes.TGetResultSetMetadataResp(
            status=ok_status(), schema=getattr(op.result, "schema", None) or table_schema(op.result.columns)))

    def _fetch_results(self, msg: RawMessage) -> bytes | None:
        request, op = self._local_operation(msg)
        if op is None:
            return None
        if request.fetchType == LOG_FETCH:
            # Beeline polls the log of every statement; local ones have none.
            return self._reply(msg, ttypes.TFetchResultsResp(
                status=ok_status(), hasMoreRows=False,
                results=empty_log_row_set(op.protocol_version)))
        pending = self._not_finished(msg, op)
        if pending is not None:
            return pending
        orientation = request.orientation
        if orientation is None:
            orientation = ttypes.TFetchOrientation.FETCH_NEXT
        if orientation == ttypes.TFetchOrientation.FETCH_FIRST:
            start = 0
        elif orientation == ttypes.TFetchOrientation.FETCH_NEXT:
            start = op.cursor
        else:
            name = ttypes.TFetchOrientation._VALUES_TO_NAMES.get(orientation, orientation)
            return self._error_reply(msg, f"The fetch type {name} is not supported for this resultset", "HY106", 1000)
        size = request.maxRows if request.maxRows and request.maxRows > 0 else DEFAULT_FETCH_SIZE
        rows = op.result.rows[start:start + size]
        end = start + len(rows)
        try:
            reply = self._reply(msg, ttypes.TFetchResultsResp(
                status=ok_status(), hasMoreRows=end < len(op.result.rows),
                results=build_row_set(op.result.columns, rows, start, op.protocol_version)))
        except Exception as exc:
            log.exception("cannot encode rows %d..%d of a local result", start, end)
            return self._error_reply(msg, f"Cannot encode result rows: {_describe(exc)}")
        op.cursor = end  # only once the batch is known to be encodable
        return reply

    def _close_operation(self, msg: RawMessage) -> bytes | None:
        _, op = self._local_operation(msg)
        if op is None:
            return None
        self.operations.pop(op.guid, None)
        op.control.cancel()  # a no-op once it ended; HiveServer2 cancels a running one too
        return self._reply(msg, ttypes.TCloseOperationResp(status=ok_status()))

    def _cancel_operation(self, msg: RawMessage) -> bytes | None:
        _, op = self._local_operation(msg)
        if op is None:
            return None
        # Cancelling a finished operation is a no-op in HiveServer2 too.
        if not op.done.is_set():
            op.control.cancel()
        return self._reply(msg, ttypes.TCancelOperationResp(status=ok_status()))

    def _get_log(self, msg: RawMessage) -> bytes | None:
        _, op = self._local_operation(msg)
        if op is None:
            return None
        return self._reply(msg, ttypes.TGetLogResp(status=ok_status(), log=""))


class Gateway:
    """HiveServer2 binary-protocol front end of the tierlake server.

    ``handler`` (a :class:`StatementHandler`) answers the statements it
    wants; everything else is relayed to the Spark Thrift Server at
    ``backend_host:backend_port``: with ``backend_secret``, a server that
    takes SASL PLAIN with that secret as the password (the internal STS),
    else a NOSASL one. ``auth`` is ``"PLAIN"`` (SASL
    PLAIN, what Hive calls NONE/LDAP/CUSTOM; ``"NONE"`` is accepted as an
    alias) or ``"NOSASL"`` (raw Thrift, clients use ``auth=noSasl``).
    ``authenticator(user, password) -> bool`` checks PLAIN logins; ``None``
    accepts everyone (development mode). ``authorizer`` (see
    :class:`server.authz.Authorizer`) checks every statement of a session
    with ``check(user, statement, session)`` before it runs or is
    relayed, raising a ``TierlakeError`` to refuse it; its ``authenticate``
    checks logins when no ``authenticator`` is given. ``ssl_context`` (a
    server-side :class:`ssl.SSLContext`) turns on TLS for every client.
    ``on_session_opened(guid, secret)`` runs after the backend opened a
    session and before the client hears of it, so it may prepare the
    session (the server registers its UDFs there); its failures are logged.

    Connection slots (:class:`~server.gateway.transport.security.Admission`):
    ``max_connections`` logged-in connections, and apart from them
    ``max_unauthenticated`` connections still in their handshakes, at most
    ``max_unauthenticated_per_address`` of them from one address; a newcomer
    that would overflow those evicts the oldest handshake of its own address
    or of the address holding the most (``Admission`` has the rule). Unset,
    each comes from its ``tierlake.gateway.*`` setting's default.
    """

    def __init__(
        self,
        host: str,
        port: int,
        backend_host: str,
        backend_port: int,
        handler: StatementHandler,
        auth: str = "PLAIN",
        authenticator: Authenticator | None = None,
        max_connections: int | None = None,
        *,
        authorizer=None,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = 10.0,
        handshake_timeout: float = 30.0,
        max_message_size: int = DEFAULT_MAX_MESSAGE,
        max_request_size: int = DEFAULT_MAX_REQUEST,
        backend_secret: str | None = None,
        on_session_opened: Callable[[bytes, bytes], None] | None = None,
        max_unauthenticated: int | None = None,
        max_unauthenticated_per_address: int | None = None,
        max_reply_size: int | None = None,
    ):
        mode = (auth or "PLAIN").upper()
        mode = "PLAIN" if mode == "NONE" else mode
        if mode not in ("PLAIN", "NOSASL"):
            raise ValueError(f"auth must be 'PLAIN' or 'NOSASL', not {auth!r}")
        if not isinstance(handler, StatementHandler):
            raise TypeError("handler must have wants() and execute() methods")
        self.host = host
        self.port = port
        self.backend_host = backend_host
        self.backend_port = backend_port
        self.handler = handler
        self.auth = mode
        if authorizer is not None and getattr(authorizer, "enabled", False) and mode == "NOSASL":
            raise ValueError("auth NOSASL cannot check passwords: use PLAIN with a password file")
        if authenticator is None and authorizer is not None:
            authenticator = authorizer.authenticate
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.ssl_context = ssl_context
        self.max_connections = _or_default(max_connections, "tierlake.gateway.max-connections")
        self._admission = Admission(
            self.max_connections,
            _or_default(max_unauthenticated, "tierlake.gateway.max-unauthenticated-connections"),
            _or_default(max_unauthenticated_per_address, "tierlake.gateway.max-unauthenticated-per-address"))
        self._evictions_logged = (0, 0.0)  # (evictions counted, monotonic time) at the last warning
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        self.max_message_size = max_message_size
        self.max_request_size = max_request_size
        self.max_reply_size = _or_default(max_reply_size, "tierlake.gateway.max-reply-size")
        self.backend_secret = backend_secret
        self.on_session_opened = on_session_opened
        self._sock: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict[_Connection, threading.Thread] = {}
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
            self.auth,
            ", TLS" if self.ssl_context else "",
            ", password file" if getattr(self.authorizer, "enabled", False) else "",
            self.backend_host,
            self.backend_port,
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
        waiting: dict[_Connection, float] = {}  # → the handshake deadline; accept order
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
            conn = _Connection(self, sock, address)
            conn.deadline = time.monotonic() + self.handshake_timeout
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

    def _wake(self, selector: selectors.BaseSelector, waiting: dict, conn: _Connection) -> None:
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

    def _drop_waiting(self, selector: selectors.BaseSelector, waiting: dict, conn: _Connection) -> None:
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
            log.warning("on_session_opened hook failed: %s", _describe(exc))
            log.debug("on_session_opened failure", exc_info=True)

    def _forget(self, conn: _Connection) -> None:
        self._admission.forget(conn)
        with self._lock:
            self._connections.pop(conn, None)


def _or_default(value: int | None, key: str) -> int:
    """``value``, or the default of setting ``key``: one place for the defaults, the registry."""
    return settings.parse_default(key) if value is None else value
