"""One client connection of the gateway: its handshakes (TLS, SASL), the relay of
its messages to its own link to the internal Spark Thrift Server, and the
checks on what it sends.

Messages are relayed byte-for-byte. With a password file, every request is
first decoded strictly by the stubs (refused when they cannot: bad UTF-8,
unknown fields, a message type other than CALL) and OpenSession's
configuration is checked against an allow-list (auth/requestcheck.py). Every
handle a request names must be the connection's own: a session opened on it,
an operation made in one of those sessions; Spark's session manager serves
any handle it knows to any connection, so a foreign one is refused here and
never relayed. Statements the gateway answers itself: local.py.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from TCLIService import TCLIService, ttypes
from thrift.Thrift import TApplicationException, TMessageType

from tierlake.server.exceptions import InvalidHandleError, ResultTooLargeError, ServerStoppingError, TierlakeError
from tierlake.server.gateway.auth.requestcheck import (
    NAMES_NO_HANDLE,
    SESSION,
    check_configuration,
    named_handle,
)
from tierlake.server.gateway.transport import errors, rawmethods
from tierlake.server.gateway.transport.local import TERMINAL, LocalOperation, LocalStatements, describe
from tierlake.server.gateway.transport.protocol import (
    MessageReader,
    RawMessage,
    SessionInfo,
    SocketTransport,
    decode_body,
    encode_message,
    encode_reply,
    error_status,
    strict_decode,
)
from tierlake.server.gateway.transport.sasl import NotSaslClient, SaslError, SaslServerTransport
from tierlake.server.gateway.transport.security import TlsError, refuse_nosasl, start_tls
from tierlake.server.gateway.transport.upstream import UpstreamError, connect_upstream
from tierlake.server.observability import metrics

log = logging.getLogger("tierlake.gateway")

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
# Replies that carry a statement's error (reworded by _readable_error).
_READABLE_ERRORS = frozenset({"ExecuteStatement", "GetOperationStatus"})


class BackendError(Exception):
    """The link to the internal STS failed; the client connection must go."""


class NoSlot(Exception):
    """The connection logged in (or needs no login) but gets no authenticated slot."""


class Connection(LocalStatements):
    """One client connection, its backend link, its sessions and local operations."""

    def __init__(self, gateway: Any, sock: socket.socket, address):
        # gateway: the server.Gateway that accepted it (not imported: server.py imports this module)
        self.gateway = gateway
        self.sock = sock
        self.address = f"{address[0]}:{address[1]}"
        self.user: str | None = None
        self.deadline = time.monotonic() + gateway.settings.handshake_timeout  # of the handshakes; set at accept
        self.client = None
        self.backend: SocketTransport | None = None
        self.sessions: dict[bytes, SessionInfo] = {}
        self.operations: dict[bytes, LocalOperation] = {}
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
        except NoSlot as exc:
            log.warning("refused %s: %s", self.address, exc)
        except BackendError as exc:
            if not self._closing:
                log.error("backend link of %s failed: %s", self.address, exc)
        except (ConnectionResetError, BrokenPipeError) as exc:
            if not self._closing:
                log.info("client %s went away: %s", self.address, exc)
        except Exception as exc:  # malformed input must only cost this connection
            if not self._closing:
                log.warning("closing connection from %s: %s",
                            self.address, describe(exc))
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
        if gw.settings.ssl_context is not None:
            self.sock = start_tls(self.sock, gw.settings.ssl_context, deadline, on_wrapped=self._wrapped)
        self.sock.settimeout(None)
        if gw.settings.auth == "PLAIN":
            transport = SaslServerTransport(self.sock, gw.authenticator, gw.settings.max_request_size,
                                            gw.settings.handshake_timeout)
            self.client = transport
            try:
                self.user = transport.handshake(deadline, admit=self._admit)
            except NotSaslClient as exc:
                try:
                    refuse_nosasl(self.sock, exc.prefix, max(0.1, deadline - time.monotonic()))
                except Exception as refusal:  # noqa: BLE001 - garbage that merely starts like Thrift
                    log.debug("cannot answer the NOSASL client %s: %s", self.address, describe(refusal))
                raise
        else:
            refusal = self._admit(None)  # NOSASL: nobody to authenticate, the slot is taken now
            if refusal is not None:
                raise NoSlot(refusal)
            self.client = SocketTransport(self.sock)
        backend = gw.settings
        try:
            self.backend = connect_upstream(backend.backend_host, backend.backend_port, self.user,
                                            backend.backend_secret, backend.connect_timeout, backend.max_message_size)
        except (OSError, UpstreamError) as exc:
            raise BackendError(f"cannot connect to {backend.backend_host}:{backend.backend_port}: {exc}") from None
        if self._closing:  # stop() ran while we were connecting
            self.close()
            raise BackendError("gateway stopping")
        self._backend_reader = MessageReader(self.backend, gw.settings.max_message_size)
        self._client_reader = MessageReader(self.client, gw.settings.max_request_size)
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
        # A refusal is logged where the handshake fails (SaslError, NoSlot); evictions in bulk by the accept loop.
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
            log.warning("refused an undecodable %s from %s: %s", msg.name, self.address, describe(exc))
            refusal = f"request refused: the gateway cannot decode this {msg.name} request ({describe(exc)})"
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
                f"({describe(exc)})"))
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
            except BackendError:
                raise
            except Exception as exc:
                log.exception("gateway failed to answer %s from %s", msg.name, self.address)
                return self._error_reply(msg, f"Internal gateway error: {describe(exc)}")
            if reply is not None:
                return reply
        reply_msg = self._relay(msg)
        if reply_msg is not None:
            if msg.name == "FetchResults" and len(reply_msg.data) > self.gateway.settings.max_reply_size:
                # One huge value (SELECT repeat(…)) would otherwise end a Java client's connection
                # ("Length exceeded max allowed: 16384000") with nothing said of why.
                error = ResultTooLargeError(
                    f"result too large: this fetch is {len(reply_msg.data)} bytes, more than "
                    f"tierlake.gateway.max-reply-size ({self.gateway.settings.max_reply_size} bytes); fetch fewer rows "
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
                    if response is None or response.operationState not in TERMINAL:
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
            raise BackendError(describe(exc)) from exc
        if reply is None:
            raise BackendError("the Spark Thrift Server closed the connection")
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
            self.gateway.handler.session_closed(guid)
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
