"""A gateway-owned HiveServer2 client session on the internal Spark Thrift
Server: runs one statement and returns Spark's result-set schema and rows,
as the status-read cache (:mod:`server.gateway.routing.sys_reads`) keeps them.

It connects the way the gateway's own backend link does
(:func:`server.gateway.transport.upstream.connect_upstream`): SASL PLAIN with this
process's secret, the only login the internal server accepts, as the client's
user (so Spark's statement deadline applies that user's bound, StatementDeadline.java)
or, for no client in particular, as ``tierlake-gateway``."""

from __future__ import annotations

import time
from typing import Any

from TCLIService import TCLIService, ttypes
from thrift.protocol import TBinaryProtocol

from tierlake.server.exceptions import OperationCancelledError, SparkSqlError
from tierlake.server.gateway.transport.upstream import connect_upstream

PROTOCOL = ttypes.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V10
FETCH_ROWS = 10_000
_OK = (ttypes.TStatusCode.SUCCESS_STATUS, ttypes.TStatusCode.SUCCESS_WITH_INFO_STATUS)
_ENDED = {ttypes.TOperationState.CANCELED_STATE: "the statement was cancelled",
          ttypes.TOperationState.CLOSED_STATE: "the statement was closed before it ended",
          ttypes.TOperationState.TIMEDOUT_STATE: "the statement ran longer than its time limit",
          ttypes.TOperationState.UKNOWN_STATE: "the statement ended in an unknown state"}
# The Thrift column Spark filled → the LocalResult type that encodes it the same way.
_KINDS = {"boolVal": "boolean", "byteVal": "tinyint", "i16Val": "smallint", "i32Val": "int",
          "i64Val": "bigint", "doubleVal": "double", "stringVal": "string", "binaryVal": "binary"}
# For an empty result (no column values to look at): Spark's type ids.
_TYPE_KINDS = {ttypes.TTypeId.BOOLEAN_TYPE: "boolean", ttypes.TTypeId.TINYINT_TYPE: "tinyint",
               ttypes.TTypeId.SMALLINT_TYPE: "smallint", ttypes.TTypeId.INT_TYPE: "int",
               ttypes.TTypeId.BIGINT_TYPE: "bigint", ttypes.TTypeId.FLOAT_TYPE: "double",
               ttypes.TTypeId.DOUBLE_TYPE: "double", ttypes.TTypeId.BINARY_TYPE: "binary"}


def _check(status: Any) -> None:
    if status.statusCode not in _OK:
        raise SparkSqlError(status.errorMessage or "statement failed", status.sqlState or "XX000")


def _is_null(bitmap: bytes, i: int) -> bool:
    return i // 8 < len(bitmap) and bool(bitmap[i // 8] & (1 << (i % 8)))


def decode_columns(row_set: Any) -> tuple[list[str], list[tuple]]:
    """(LocalResult kinds, rows) of a columnar TRowSet (protocol V6+)."""
    kinds, columns = [], []
    for column in row_set.columns or []:
        attr = next(a for a in _KINDS if getattr(column, a) is not None)
        values = getattr(column, attr)
        nulls = values.nulls or b""
        kinds.append(_KINDS[attr])
        columns.append([None if _is_null(nulls, i) else v for i, v in enumerate(values.values)])
    return kinds, list(zip(*columns, strict=True)) if columns else []


def schema_kinds(schema: Any) -> list[str]:
    return [_TYPE_KINDS.get(c.typeDesc.types[0].primitiveEntry.type, "string") for c in schema.columns]


class BackendClient:
    """One connection and session; not thread-safe (pooled by the caller)."""

    USER = "tierlake-gateway"

    def __init__(self, host: str, port: int, secret: str | None = None, timeout_s: float = 600.0,
                 user: str | None = None):
        self.user = user or self.USER
        self._host, self._port, self._secret = host, port, secret
        self.transport = connect_upstream(host, port, self.user, secret, timeout_s, 256 << 20)
        self.client = TCLIService.Client(TBinaryProtocol.TBinaryProtocol(self.transport))
        response = self.client.OpenSession(ttypes.TOpenSessionReq(
            client_protocol=PROTOCOL, username=self.user, configuration={}))
        _check(response.status)
        self.session = response.sessionHandle

    def run(self, statement: str, timeout_s: int = 0, control: Any = None
            ) -> tuple[Any, list[tuple[str, str]], list[tuple]]:
        """(TTableSchema as Spark sent it, [(name, kind)], rows); ``timeout_s``: the statement's
        own time limit, as a client's queryTimeout (0: the server's). ``control``: the client's
        statement (operations.OperationControl): its cancel cancels Spark's operation.

        The statement runs asynchronously and is polled, so that its operation handle is known
        while it runs: a synchronous ExecuteStatement returns the handle only once the statement
        has ended, and a client's cancel of a sys read reached nothing (its Spark jobs ran on)."""
        response = self.client.ExecuteStatement(ttypes.TExecuteStatementReq(
            sessionHandle=self.session, statement=statement, runAsync=True, queryTimeout=timeout_s or None))
        _check(response.status)
        handle = response.operationHandle
        unregister = control.on_cancel(lambda: self._cancel(handle)) if control is not None else (lambda: None)
        try:
            self._wait(handle)
        except BaseException:
            unregister()
            self._close_operation(handle)
            raise
        unregister()
        try:
            meta = self.client.GetResultSetMetadata(ttypes.TGetResultSetMetadataReq(operationHandle=handle))
            _check(meta.status)
            kinds, rows = schema_kinds(meta.schema), []
            while True:
                fetched = self.client.FetchResults(ttypes.TFetchResultsReq(
                    operationHandle=handle, orientation=ttypes.TFetchOrientation.FETCH_NEXT, maxRows=FETCH_ROWS))
                _check(fetched.status)
                batch_kinds, batch = decode_columns(fetched.results)
                if batch_kinds:
                    kinds = batch_kinds
                rows.extend(batch)
                if not batch:
                    break
        finally:
            self._close_operation(handle)
        names = [c.columnName for c in meta.schema.columns]
        return meta.schema, list(zip(names, kinds, strict=True)), rows

    def _wait(self, handle: Any) -> None:
        """Until the operation ends; its error raised as Spark gave it."""
        pause = 0.002
        while True:
            status = self.client.GetOperationStatus(ttypes.TGetOperationStatusReq(operationHandle=handle))
            _check(status.status)
            state = status.operationState
            if state == ttypes.TOperationState.FINISHED_STATE:
                return
            if state == ttypes.TOperationState.ERROR_STATE:
                raise SparkSqlError(status.errorMessage or "statement failed", status.sqlState or "XX000")
            if state in _ENDED:
                raise OperationCancelledError(_ENDED[state])
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _cancel(self, handle: Any) -> None:
        """Cancel the operation from another connection: this one is busy polling it (a Thrift
        connection carries one call at a time); the internal server finds operations by handle."""
        try:
            other = BackendClient(self._host, self._port, self._secret, timeout_s=30, user=self.user)
        except Exception:  # noqa: BLE001 - the statement's deadline still bounds it
            return
        try:
            other.client.CancelOperation(ttypes.TCancelOperationReq(operationHandle=handle))
        except Exception:  # noqa: BLE001 - it ended meanwhile
            pass
        finally:
            other.close()

    def _close_operation(self, handle: Any) -> None:
        try:
            self.client.CloseOperation(ttypes.TCloseOperationReq(operationHandle=handle))
        except Exception:  # noqa: BLE001 - the result is complete; a lost close only leaks an operation
            pass

    def close(self) -> None:
        try:
            self.client.CloseSession(ttypes.TCloseSessionReq(sessionHandle=self.session))
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        self.transport.close()
