"""The gateway in front of a fake HiveServer2 written with PyHive's stubs:
relay, interception, session bookkeeping and robustness, without a JVM."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import pytest
from pyhive import hive
from TCLIService import TCLIService, ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TApplicationException, TMessageType, TType
from thrift.transport.TSocket import TSocket
from thrift.transport.TTransport import TBufferedTransport, TMemoryBuffer

from tierlake.server.gateway.transport.protocol import error_status, ok_status
from tierlake.server.gateway.transport.server import Gateway
from tierlake.server.gateway.transport.settings import GatewaySettings

from ..toy import ROWS_COLUMNS, ToyHandler, serving, toy_row, toy_ts_text

V = ttypes.TProtocolVersion
FETCH_NEXT = ttypes.TFetchOrientation.FETCH_NEXT
FETCH_FIRST = ttypes.TFetchOrientation.FETCH_FIRST
ERROR = ttypes.TStatusCode.ERROR_STATUS
SUCCESS = ttypes.TStatusCode.SUCCESS_STATUS


class FakeHiveServer:
    """Answers OpenSession/CloseSession/GetInfo and ``SELECT 1``; anything
    else fails like a real server would."""

    def __init__(self):
        self.usernames: list = []
        self.ops: dict = {}

    def OpenSession(self, req):
        self.usernames.append(req.username)
        handle = ttypes.TSessionHandle(ttypes.THandleIdentifier(os.urandom(16), os.urandom(16)))
        return ttypes.TOpenSessionResp(
            status=ok_status(), sessionHandle=handle, configuration={},
            serverProtocolVersion=min(req.client_protocol, V.HIVE_CLI_SERVICE_PROTOCOL_V10))

    def CloseSession(self, req):
        return ttypes.TCloseSessionResp(status=ok_status())

    def GetInfo(self, req):
        return ttypes.TGetInfoResp(status=ok_status(),
                                   infoValue=ttypes.TGetInfoValue(stringValue="fake"))

    def ExecuteStatement(self, req):
        statement = req.statement.strip().upper()
        if statement != "SELECT 1" and not statement.startswith("USE "):
            return ttypes.TExecuteStatementResp(
                status=error_status("fake: cannot run " + req.statement, "42000", 0))
        guid = os.urandom(16)
        self.ops[guid] = False
        return ttypes.TExecuteStatementResp(status=ok_status(), operationHandle=ttypes.TOperationHandle(
            ttypes.THandleIdentifier(guid, os.urandom(16)),
            ttypes.TOperationType.EXECUTE_STATEMENT, statement == "SELECT 1"))

    def _op(self, req):
        return req.operationHandle.operationId.guid in self.ops

    def GetOperationStatus(self, req):
        if not self._op(req):
            return ttypes.TGetOperationStatusResp(status=error_status("Invalid OperationHandle"))
        return ttypes.TGetOperationStatusResp(
            status=ok_status(), operationState=ttypes.TOperationState.FINISHED_STATE)

    def GetResultSetMetadata(self, req):
        entry = ttypes.TTypeEntry(primitiveEntry=ttypes.TPrimitiveTypeEntry(ttypes.TTypeId.INT_TYPE))
        return ttypes.TGetResultSetMetadataResp(status=ok_status(), schema=ttypes.TTableSchema(
            [ttypes.TColumnDesc("1", ttypes.TTypeDesc([entry]), 0)]))

    def FetchResults(self, req):
        guid = req.operationHandle.operationId.guid
        if guid not in self.ops:
            return ttypes.TFetchResultsResp(status=error_status("Invalid OperationHandle"))
        values = [] if self.ops[guid] else [1]
        self.ops[guid] = True
        return ttypes.TFetchResultsResp(status=ok_status(), hasMoreRows=False, results=ttypes.TRowSet(
            0, [], [ttypes.TColumn(i32Val=ttypes.TI32Column(values, b""))]))

    def CloseOperation(self, req):
        self.ops.pop(req.operationHandle.operationId.guid, None)
        return ttypes.TCloseOperationResp(status=ok_status())


@pytest.fixture(scope="module")
def fake_backend():
    fake = FakeHiveServer()
    with serving(fake) as port:
        yield fake, port


@pytest.fixture(scope="module")
def gateways(fake_backend):
    _, port = fake_backend
    handler = ToyHandler()
    started = {auth: Gateway(GatewaySettings(backend_port=port, auth=auth), handler).start()
               for auth in ("PLAIN", "NOSASL")}
    yield started
    for gw in started.values():
        gw.stop()


@pytest.fixture(params=["PLAIN", "NOSASL"])
def gateway(request, gateways):
    return gateways[request.param]


def pyhive(gw: Gateway, user: str = "alice"):
    return hive.connect("127.0.0.1", gw.port, username=user,
                        auth="NOSASL" if gw.settings.auth == "NOSASL" else None)


class RawClient:
    """TCLIService client that can ask for any protocol version."""

    def __init__(self, gw: Gateway, user="alice", version=V.HIVE_CLI_SERVICE_PROTOCOL_V10,
                 open_as=None):
        sock = TSocket("127.0.0.1", gw.port)
        if gw.settings.auth == "PLAIN":
            import thrift_sasl
            from pyhive.sasl_compat import PureSASLClient
            self.transport = thrift_sasl.TSaslClientTransport(
                lambda: PureSASLClient("127.0.0.1", username=user, password="x"), "PLAIN", sock)
        else:
            self.transport = TBufferedTransport(sock)
        self.transport.open()
        self.client = TCLIService.Client(TBinaryProtocol(self.transport))
        resp = self.client.OpenSession(ttypes.TOpenSessionReq(
            client_protocol=version, username=open_as or user))
        assert resp.status.statusCode == SUCCESS
        self.session = resp.sessionHandle
        self.version = resp.serverProtocolVersion

    def execute(self, statement):
        return self.client.ExecuteStatement(
            ttypes.TExecuteStatementReq(self.session, statement, runAsync=True))

    def fetch(self, handle, max_rows=100, orientation=FETCH_NEXT, fetch_type=0):
        return self.client.FetchResults(ttypes.TFetchResultsReq(handle, orientation, max_rows,
                                                                fetch_type))

    def close(self):
        self.transport.close()


def test_pyhive_relayed_and_local_statements(gateway):
    conn = pyhive(gateway)
    cursor = conn.cursor(arraysize=7)
    cursor.execute("SELECT 1")
    assert cursor.fetchall() == [(1,)]
    cursor.execute("CALL TOY.ROWS(50)")
    assert [d[:2] for d in cursor.description] == [
        ("name", "STRING_TYPE"), ("n", "BIGINT_TYPE"), ("ts", "TIMESTAMP_TYPE"),
        ("nothing", "STRING_TYPE")]
    assert cursor.fetchall() == [toy_row(i) for i in range(50)]
    conn.close()


def test_old_protocol_gets_row_based_results_and_cursor_orientations(gateway):
    raw = RawClient(gateway, version=V.HIVE_CLI_SERVICE_PROTOCOL_V5)
    assert raw.version == V.HIVE_CLI_SERVICE_PROTOCOL_V5
    resp = raw.execute("CALL TOY.ROWS(5)")
    assert resp.status.statusCode == SUCCESS and resp.operationHandle.hasResultSet
    handle = resp.operationHandle
    status = raw.client.GetOperationStatus(ttypes.TGetOperationStatusReq(handle))
    assert status.operationState == ttypes.TOperationState.FINISHED_STATE and status.hasResultSet
    schema = raw.client.GetResultSetMetadata(ttypes.TGetResultSetMetadataReq(handle)).schema
    assert [c.columnName for c in schema.columns] == [name for name, _ in ROWS_COLUMNS]

    first = raw.fetch(handle, max_rows=2)
    assert first.hasMoreRows and first.results.columns is None
    assert [r.colVals[0].stringVal.value for r in first.results.rows] == ["row0", "row1"]
    assert first.results.rows[1].colVals[2].stringVal.value == toy_ts_text(1)
    assert first.results.rows[0].colVals[3].stringVal.value is None
    second = raw.fetch(handle, max_rows=2)
    assert second.results.startRowOffset == 2
    assert [r.colVals[1].i64Val.value for r in second.results.rows] == [2, 3]
    again = raw.fetch(handle, max_rows=1, orientation=FETCH_FIRST)
    assert again.results.startRowOffset == 0 and len(again.results.rows) == 1
    rest = raw.fetch(handle, max_rows=0)  # 0 means "the default batch", not "nothing"
    assert [r.colVals[1].i64Val.value for r in rest.results.rows] == [1, 2, 3, 4]
    assert not rest.hasMoreRows
    assert raw.fetch(handle).results.rows == []

    log = raw.fetch(handle, fetch_type=1)
    assert log.status.statusCode == SUCCESS and log.results.rows == []
    prior = raw.fetch(handle, orientation=ttypes.TFetchOrientation.FETCH_PRIOR)
    assert prior.status.statusCode == ERROR and prior.status.sqlState == "HY106"
    assert raw.client.GetLog(ttypes.TGetLogReq(handle)).status.statusCode == SUCCESS
    assert raw.client.CancelOperation(ttypes.TCancelOperationReq(handle)).status.statusCode == SUCCESS
    assert raw.client.CloseOperation(ttypes.TCloseOperationReq(handle)).status.statusCode == SUCCESS
    # Closed: no longer ours, so the backend answers (and knows nothing of it).
    gone = raw.fetch(handle)
    assert gone.status.statusCode == ERROR and "Invalid OperationHandle" in gone.status.errorMessage
    raw.close()


def test_columnar_results_for_v6_and_newer(gateway):
    raw = RawClient(gateway, version=V.HIVE_CLI_SERVICE_PROTOCOL_V10)
    handle = raw.execute("CALL TOY.ROWS(3)").operationHandle
    results = raw.fetch(handle).results
    assert results.rows == [] and results.columns[1].i64Val.values == [0, 1, 2]
    assert results.columns[3].stringVal.nulls == b"\x07"
    raw.close()


def test_close_session_drops_local_operations(gateway):
    raw = RawClient(gateway)
    handle = raw.execute("CALL TOY.ROWS(10)").operationHandle
    assert len(raw.fetch(handle, max_rows=2).results.columns[0].stringVal.values) == 2
    raw.client.CloseSession(ttypes.TCloseSessionReq(raw.session))
    gone = raw.fetch(handle)
    assert gone.status.statusCode == ERROR and "Invalid OperationHandle" in gone.status.errorMessage
    raw.close()


def test_session_info_and_username_rewrite(gateways, fake_backend):
    fake, _ = fake_backend
    handler = gateways["PLAIN"].handler
    # Authenticated as alice over SASL but claiming mallory in OpenSession.
    raw = RawClient(gateways["PLAIN"], user="alice", open_as="mallory")
    assert fake.usernames[-1] == "alice"
    resp = raw.execute("CALL TOY.WHOAMI()")
    results = raw.fetch(resp.operationHandle).results
    assert results.columns[0].stringVal.values == ["alice"]
    assert results.columns[1].i32Val.values == [V.HIVE_CLI_SERVICE_PROTOCOL_V10]
    assert handler.sessions[-1].session_guid == raw.session.sessionId.guid
    assert handler.sessions[-1].client_address.startswith("127.0.0.1:")
    raw.close()
    raw = RawClient(gateways["NOSASL"], user="bob")
    results = raw.fetch(raw.execute("CALL TOY.WHOAMI()").operationHandle).results
    assert results.columns[0].stringVal.values == ["bob"]
    raw.close()


@pytest.mark.parametrize("statement, sqlstate, code, text", [
    ("CALL TOY.FAIL()", "42883", 2002, "procedure toy.fail does not exist"),
    ("CALL TOY.BOOM()", "XX000", 1000, "Internal error: RuntimeError: kaboom"),
    ("CALL TOY.BADTYPE()", "XX000", 1000, "unsupported column type"),
    ("CALL TOY.WANTS_EXPLODES()", "XX000", 1000, "wants exploded"),
])
def test_local_errors_reach_the_client_and_the_connection_survives(gateway, statement, sqlstate,
                                                                   code, text):
    conn = pyhive(gateway)
    cursor = conn.cursor()
    with pytest.raises(hive.OperationalError) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    assert (status.statusCode, status.sqlState, status.errorCode) == (ERROR, sqlstate, code)
    assert text in status.errorMessage
    cursor.execute("CALL TOY.ROWS(2)")
    assert len(cursor.fetchall()) == 2
    cursor.execute("SELECT 1")
    assert cursor.fetchall() == [(1,)]
    conn.close()


def test_unencodable_row_fails_the_fetch_not_the_connection(gateway):
    raw = RawClient(gateway)
    handle = raw.execute("CALL TOY.HUGE()").operationHandle
    resp = raw.fetch(handle)
    assert resp.status.statusCode == ERROR and "Cannot encode" in resp.status.errorMessage
    assert raw.client.GetInfo(ttypes.TGetInfoReq(raw.session, 0)).infoValue.stringValue == "fake"
    raw.close()


def test_relayed_error_and_unknown_session(gateway):
    raw = RawClient(gateway)
    resp = raw.execute("SELECT * FROM nowhere")
    assert resp.status.statusCode == ERROR and "fake: cannot run" in resp.status.errorMessage
    # A session the connection never opened is refused by the gateway, never relayed
    # (tests/security/test_foreign_handles.py); the connection stays usable.
    stranger = ttypes.TSessionHandle(ttypes.THandleIdentifier(b"s" * 16, b"t" * 16))
    resp = raw.client.ExecuteStatement(ttypes.TExecuteStatementReq(stranger, "CALL TOY.ROWS(1)"))
    assert (resp.status.sqlState, resp.status.errorMessage[:22]) == ("HY000", "Invalid SessionHandle:")
    assert raw.execute("SELECT 1").status.statusCode == SUCCESS
    raw.close()


def test_unknown_rpc_is_relayed_byte_for_byte(gateways):
    gw = gateways["NOSASL"]
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin("GetQueryId", TMessageType.CALL, 1234)
    proto.writeStructBegin("GetQueryId_args")
    proto.writeFieldBegin("req", TType.STRUCT, 1)
    proto.writeStructBegin("TGetQueryIdReq")
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        transport = TBufferedTransport(TSocket())
        transport._TBufferedTransport__trans.handle = sock
        iproto = TBinaryProtocol(transport)
        sock.sendall(buf.getvalue())
        name, mtype, seqid = iproto.readMessageBegin()
        assert (name, mtype, seqid) == ("GetQueryId", TMessageType.EXCEPTION, 1234)
        error = TApplicationException()
        error.read(iproto)
        assert error.type == TApplicationException.UNKNOWN_METHOD
        # Still usable afterwards.
        client = TCLIService.Client(iproto)
        assert client.OpenSession(ttypes.TOpenSessionReq(
            client_protocol=V.HIVE_CLI_SERVICE_PROTOCOL_V10)).status.statusCode == SUCCESS


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True


GARBAGE = {
    "random": os.urandom(2048),
    "truncated-sasl-frame": b"\x01\x00\x00\x00\x05PL",
    "huge-sasl-frame": b"\x01\xff\xff\xff\xff",
    "bad-thrift-version": b"\x80\x07\x00\x01" + os.urandom(64),
    "truncated-thrift": b"\x80\x01\x00\x01\x00\x00\x00\x0bOpenSess",
    "unversioned-thrift": b"\x00\x00\x00\x0bOpenSession\x01\x00\x00\x00\x01\x00",
}


def send_garbage(sock: socket.socket, garbage: bytes) -> None:
    # The gateway may hang up (with a reset, as data is left unread) before
    # everything is sent: that is the behaviour under test, not a failure.
    try:
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_closes_only_that_connection(gateway, garbage, caplog):
    survivor = pyhive(gateway)
    with caplog.at_level(logging.INFO, logger="tierlake.gateway"):
        sock = socket.create_connection(("127.0.0.1", gateway.port))
        send_garbage(sock, garbage)
        assert closed_by_peer(sock)
        sock.close()
        assert wait_for(lambda: "closing connection" in caplog.text
                        or "SASL negotiation" in caplog.text)
    cursor = survivor.cursor()
    cursor.execute("CALL TOY.ROWS(1)")
    assert cursor.fetchall() == [toy_row(0)]
    survivor.close()
    fresh = pyhive(gateway)
    cursor = fresh.cursor()
    cursor.execute("SELECT 1")
    assert cursor.fetchall() == [(1,)]
    fresh.close()


def test_garbage_after_sasl_handshake(gateways, caplog):
    gw = gateways["PLAIN"]
    with caplog.at_level(logging.WARNING, logger="tierlake.gateway"):
        sock = socket.create_connection(("127.0.0.1", gw.port))
        sock.sendall(b"\x01\x00\x00\x00\x05PLAIN\x02\x00\x00\x00\x04\x00a\x00b")
        assert sock.recv(5) == b"\x05\x00\x00\x00\x00"
        sock.sendall(b"\x00\x00\x00\x08" + b"\x80\x01\x00\x01\xff\xff\xff\xff")
        assert closed_by_peer(sock)
        sock.close()
        assert wait_for(lambda: "closing connection" in caplog.text)


def test_backend_down_closes_the_client_only(caplog):
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        dead_port = placeholder.getsockname()[1]
    with Gateway(GatewaySettings(backend_port=dead_port, auth="NOSASL"), ToyHandler()) as gw:
        with caplog.at_level(logging.ERROR, logger="tierlake.gateway"):
            with pytest.raises(Exception):  # noqa: B017 - the client raises whichever transport error the timing gives
                pyhive(gw)
            assert wait_for(lambda: "cannot connect" in caplog.text)
        assert wait_for(lambda: gw.connection_count == 0)


def test_max_connections_and_stop(fake_backend):
    _, port = fake_backend
    gw = Gateway(GatewaySettings(backend_port=port, auth="NOSASL", max_connections=1), ToyHandler()).start()
    first = pyhive(gw)
    with pytest.raises(Exception):  # noqa: B017 - the client raises whichever transport error the timing gives
        pyhive(gw)
    cursor = first.cursor()
    cursor.execute("SELECT 1")
    assert cursor.fetchall() == [(1,)]
    gw.stop()
    assert gw.connection_count == 0
    with pytest.raises(Exception):  # noqa: B017 - the client raises whichever transport error the timing gives
        cursor.execute("SELECT 1")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", gw.port), timeout=1)


def test_constructor_validation(fake_backend):
    with pytest.raises(ValueError):
        Gateway(GatewaySettings(backend_port=1, auth="KERBEROS"), ToyHandler())
    with pytest.raises(TypeError):
        Gateway(GatewaySettings(backend_port=1), object())
    assert Gateway(GatewaySettings(backend_port=1, auth="none"), ToyHandler()).settings.auth == "PLAIN"


def test_authenticator_rejects_bad_password(fake_backend):
    _, port = fake_backend
    with Gateway(GatewaySettings(backend_port=port),
                 ToyHandler(), authenticator=lambda user, password: password == "s3cret") as gw:
        good = hive.connect("127.0.0.1", gw.port, username="erin", auth="CUSTOM", password="s3cret")
        good.close()
        with pytest.raises(Exception, match="Error validating the login"):
            hive.connect("127.0.0.1", gw.port, username="erin", auth="CUSTOM", password="nope")


def test_mismatched_client_auth_fails_fast_with_a_hint(gateways, caplog):
    with caplog.at_level(logging.WARNING, logger="tierlake.gateway"):
        started = time.monotonic()
        with pytest.raises(Exception):  # noqa: B017 - the client raises whichever transport error the timing gives
            hive.connect("127.0.0.1", gateways["PLAIN"].port, username="x", auth="NOSASL")
        with pytest.raises(Exception):  # noqa: B017 - the client raises whichever transport error the timing gives
            hive.connect("127.0.0.1", gateways["NOSASL"].port, username="x")
        assert time.monotonic() - started < 10
        assert wait_for(lambda: "noSasl" in caplog.text)


# -- long local statements: asynchronous execution, polling, cancellation -----

def _wait_state(raw, handle, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = raw.client.GetOperationStatus(ttypes.TGetOperationStatusReq(handle))
        if status.operationState != ttypes.TOperationState.RUNNING_STATE:
            return status
    raise AssertionError("still running")


def test_a_long_local_statement_is_polled_until_it_finishes(gateway):
    raw = RawClient(gateway)
    response = raw.execute("CALL TOY.SLOW(2)")
    assert response.status.statusCode == SUCCESS
    handle = response.operationHandle
    early = raw.fetch(handle)
    assert early.status.statusCode == ERROR and "found RUNNING" in early.status.errorMessage
    status = _wait_state(raw, handle)
    assert status.operationState == ttypes.TOperationState.FINISHED_STATE and status.hasResultSet
    assert raw.fetch(handle).results.columns[0].i64Val.values == [2]
    raw.close()


def test_a_long_local_statement_that_fails_reports_its_sql_error_when_polled(gateway):
    raw = RawClient(gateway)
    handle = raw.execute("CALL TOY.SLOWFAIL(2)").operationHandle
    status = _wait_state(raw, handle)
    assert status.operationState == ttypes.TOperationState.ERROR_STATE
    assert (status.sqlState, status.errorMessage) == ("42883", "slow failure")
    raw.close()


def test_cancel_operation_cancels_a_running_local_statement(gateway):
    raw = RawClient(gateway)
    statement = f"CALL TOY.SLOW(30) -- cancel {gateway.settings.auth}"
    handle = raw.execute(statement).operationHandle
    cancel = raw.client.CancelOperation(ttypes.TCancelOperationReq(handle))
    assert cancel.status.statusCode == SUCCESS
    assert _wait_state(raw, handle).operationState == ttypes.TOperationState.CANCELED_STATE
    deadline = time.monotonic() + 10
    while statement not in gateway.handler.cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert statement in gateway.handler.cancelled
    raw.close()


def test_a_client_that_disconnects_cancels_its_running_statements(gateway):
    raw = RawClient(gateway)
    statement = f"CALL TOY.SLOW(30) -- disconnect {gateway.settings.auth}"
    raw.execute(statement)
    raw.close()
    deadline = time.monotonic() + 10
    while statement not in gateway.handler.cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert statement in gateway.handler.cancelled


def test_pyhive_async_execute_and_cancel(gateway):
    cursor = pyhive(gateway).cursor()
    cursor.execute(f"CALL TOY.SLOW(30) -- pyhive {gateway.settings.auth}", async_=True)
    assert cursor.poll().operationState == ttypes.TOperationState.RUNNING_STATE
    cursor.cancel()
    deadline = time.monotonic() + 10
    while cursor.poll().operationState == ttypes.TOperationState.RUNNING_STATE and time.monotonic() < deadline:
        pass
    assert cursor.poll().operationState == ttypes.TOperationState.CANCELED_STATE
    cursor.execute("CALL TOY.ROWS(1)")  # the connection goes on
    assert len(cursor.fetchall()) == 1


def test_a_stopping_gateway_answers_running_statements_and_refuses_new_work(fake_backend):
    """Server.stop drains the gateway first: a statement already running is answered (here: its
    rows), a new statement or session is refused with ServerStoppingError, then it closes."""
    _, port = fake_backend
    gw = Gateway(GatewaySettings(backend_port=port, auth="NOSASL"), ToyHandler()).start()
    conn = pyhive(gw)
    running = conn.cursor()
    running.execute("CALL TOY.SLOW(2)", async_=True)  # runs for about 2 s
    other = pyhive(gw).cursor()
    drained: list[bool] = []
    stopper = threading.Thread(target=lambda: drained.append(gw.drain(timeout=30)))
    stopper.start()
    wait_for(lambda: gw.draining)
    with pytest.raises(Exception, match="tierlake is stopping: this request was not run"):
        other.execute("SELECT 1")
    wait_for(lambda: gw._sock is None)
    with pytest.raises(OSError):  # no new connection is accepted
        socket.create_connection(("127.0.0.1", gw.port), timeout=1)
    # The running statement is answered although the gateway is stopping.
    while running.poll().operationState not in (ttypes.TOperationState.FINISHED_STATE,
                                                ttypes.TOperationState.ERROR_STATE):
        time.sleep(0.1)
    assert running.fetchall() == [(2,)]
    stopper.join(30)
    assert drained == [True]
    gw.stop()
    assert gw.connection_count == 0
