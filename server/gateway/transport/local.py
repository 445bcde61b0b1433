"""Statements the gateway answers itself, as HiveServer2 operations.

ExecuteStatement builds the statement object (protocol.Statement), has it
authorised (Spark's parse kept on it), routed once (the handler, server/gateway/
routing/router.py) and, when its route needs a role beyond the authoriser's,
checked for that role; then runs it on the connection's thread (a synchronous
client) or its own (an asynchronous one, answered like a synchronous one when
it ends within ``ASYNC_GRACE_S``). The operation calls on the handle it made
(status, result-set metadata, fetch, close, cancel, log) are answered here;
those on any other handle are relayed (connection.py).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from dataclasses import dataclass

from TCLIService import TCLIService, ttypes

from tierlake.server.exceptions import InvalidHandleError, TierlakeError
from tierlake.server.gateway.auth.requestcheck import check_overlay
from tierlake.server.gateway.results import build_row_set, empty_log_row_set, parse_columns, table_schema
from tierlake.server.gateway.transport import errors
from tierlake.server.gateway.transport.protocol import (
    LocalResult,
    RawMessage,
    Statement,
    decode_body,
    error_status,
    ok_status,
)
from tierlake.server.observability import metrics
from tierlake.server.runtime.operations import OperationControl, running

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
TERMINAL = frozenset({ttypes.TOperationState.FINISHED_STATE, ttypes.TOperationState.ERROR_STATE,
                      ttypes.TOperationState.CANCELED_STATE, ttypes.TOperationState.CLOSED_STATE,
                      ttypes.TOperationState.TIMEDOUT_STATE})


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class LocalOperation:
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


class LocalStatements:
    """The part of a client connection (connection.Connection) that answers statements the gateway
    runs itself: ExecuteStatement, and the operation calls on the handles it made."""

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
        stmt = Statement(statement, session, parse=authorizer.parser(session) if authorizer is not None else None)
        if authorizer is not None:
            try:
                if self._checked:
                    check_overlay(request.confOverlay or {})
                authorizer.check(session.user, stmt)
            except TierlakeError as exc:
                metrics.statement("unrouted", "denied")
                self.gateway.handler.refused(stmt)  # a refused statement is a statement: it uses up the request id
                # Spark's parse error (with a password file the gateway parses first): one line, as relayed.
                message, state, code = (errors.readable(exc.message, exc.sqlstate, exc.error_code)
                                        or (exc.message, exc.sqlstate, exc.error_code))
                return self._error_reply(msg, message, state, code)
            except Exception as exc:
                log.exception("authorizer failed for %r", statement[:200])
                return self._error_reply(msg, f"permission denied: the statement could not be checked "
                                              f"({describe(exc)})", "42501", 2008)
        try:
            wanted = self.gateway.handler.route(stmt)
        except Exception as exc:
            log.exception("routing failed for %r", statement[:200])
            return self._error_reply(msg, f"Internal error: {describe(exc)}")
        if not wanted:
            return None
        if stmt.role is not None and authorizer is not None and authorizer.enabled:
            # A route that acts on the gateway's own reading of the text (tiered DDL: its columns and
            # properties) needs its role whatever Spark's parse in the client's session allowed.
            try:
                authorizer.check_role(session.user, stmt.role, self.gateway.handler.what(stmt))
            except TierlakeError as exc:
                metrics.statement("local", "denied")
                return self._error_reply(msg, exc.message, exc.sqlstate, exc.error_code)
        return self._reply(msg, self._run_local(stmt, bool(request.runAsync), int(request.queryTimeout or 0)))

    def _run_local(self, statement: Statement, run_async: bool = False,
                   timeout_s: int = 0) -> ttypes.TExecuteStatementResp:
        session = statement.session
        guid, secret = uuid.uuid4().bytes, uuid.uuid4().bytes
        op = LocalOperation(guid, session.session_guid, session.protocol_version, now_ms(),
                             OperationControl(f"{statement.text[:80]!r} from {self.address}", max(0, timeout_s)),
                             threading.Event(), secret=secret)
        if run_async:
            self.operations[guid] = op
            threading.Thread(target=self._execute_local, args=(op, statement), daemon=True,
                             name=f"tierlake-statement-{guid.hex()[:8]}").start()
            op.done.wait(ASYNC_GRACE_S)
        else:
            # This thread reads nothing until the statement ends: a client that goes away
            # meanwhile is noticed by the peer watch, which cancels the statement (liveness.py).
            token = self.gateway.peer_watch.watch(self.sock, op.control)
            try:
                self._execute_local(op, statement)
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

    def _execute_local(self, op: LocalOperation, statement: Statement) -> None:
        try:
            with running(op.control):
                result = self.gateway.handler.execute(statement)
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
            message, state, code = readable or (errors.readable_call_error(statement.text, exc.message),
                                                exc.sqlstate, exc.error_code)
            op.failure = error_status(message, state, code)
        except Exception as exc:
            log.exception("local statement %r failed", statement.text[:200])
            op.failure = error_status(f"Internal error: {describe(exc)}")
        finally:
            op.completed_ms = now_ms()
            metrics.statement("local", "ok" if op.failure is None else "error")
            op.done.set()

    def _not_finished(self, msg: RawMessage, op: LocalOperation) -> bytes | None:
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
        if state in TERMINAL:
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
            return self._error_reply(msg, f"Cannot encode result rows: {describe(exc)}")
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
