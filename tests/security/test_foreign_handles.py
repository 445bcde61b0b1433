"""A handle is only good on the connection that got it: a session opened on
it, an operation made in one of its sessions. Spark's session manager serves
any handle it knows to any connection, so the gateway refuses every other
one (SQLSTATE HY000, ``Invalid SessionHandle`` / ``Invalid OperationHandle``)
and never relays it; the owner's session and operations go on as if nothing
happened. With the real gateway and PyHive (a reader taking an admin's
handles), then the gateway in development mode with a fake backend that
records what reaches it (no JVM)."""

from __future__ import annotations

import pytest
from pyhive import hive
from TCLIService import ttypes
from thrift.Thrift import TApplicationException, TMessageType

from tests.security.conftest import PASSWORD
from tests.security.test_thrift_hardening import Raw, call_unstubbed, execute_args, get_query_id, set_client_info
from tests.server.gateway.toy import ToyHandler, serving
from tests.server.gateway.transport.test_gateway_unit import SUCCESS, FakeHiveServer, RawClient
from tierlake.server.gateway.transport import connection as gateway_connection
from tierlake.server.gateway.transport.server import Gateway
from tierlake.server.gateway.transport.settings import GatewaySettings

ERROR = ttypes.TStatusCode.ERROR_STATUS
FETCH_NEXT = ttypes.TFetchOrientation.FETCH_NEXT
INVALID_SESSION = "Invalid SessionHandle: not a session of this connection"
INVALID_OPERATION = "Invalid OperationHandle: not an operation of this connection"


def login(gw, user):
    return hive.connect("127.0.0.1", gw.port, username=user, password=PASSWORD[user], auth="CUSTOM")


def refused(status, text):
    assert status.statusCode == ERROR, status
    assert (status.sqlState, status.errorCode) == ("HY000", 2012), status
    assert status.errorMessage.startswith(text), status.errorMessage


def foreign_calls(client, session, operation):
    """Every method a stolen handle could be used with, as (name, call) pairs."""
    S, O = session, operation  # noqa: E741 - short names keep the table readable
    return [
        ("FetchResults", lambda: client.FetchResults(ttypes.TFetchResultsReq(O, FETCH_NEXT, 100))),
        ("FetchResults (log)", lambda: client.FetchResults(ttypes.TFetchResultsReq(O, FETCH_NEXT, 100, 1))),
        ("GetOperationStatus", lambda: client.GetOperationStatus(ttypes.TGetOperationStatusReq(O))),
        ("GetResultSetMetadata", lambda: client.GetResultSetMetadata(ttypes.TGetResultSetMetadataReq(O))),
        ("GetLog", lambda: client.GetLog(ttypes.TGetLogReq(O))),
        ("CancelOperation", lambda: client.CancelOperation(ttypes.TCancelOperationReq(O))),
        ("CloseOperation", lambda: client.CloseOperation(ttypes.TCloseOperationReq(O))),
        ("ExecuteStatement", lambda: client.ExecuteStatement(ttypes.TExecuteStatementReq(S, "SELECT 42"))),
        ("GetInfo", lambda: client.GetInfo(ttypes.TGetInfoReq(S, ttypes.TGetInfoType.CLI_SERVER_NAME))),
        ("GetTypeInfo", lambda: client.GetTypeInfo(ttypes.TGetTypeInfoReq(S))),
        ("GetCatalogs", lambda: client.GetCatalogs(ttypes.TGetCatalogsReq(S))),
        ("GetSchemas", lambda: client.GetSchemas(ttypes.TGetSchemasReq(S))),
        ("GetTables", lambda: client.GetTables(ttypes.TGetTablesReq(S))),
        ("GetTableTypes", lambda: client.GetTableTypes(ttypes.TGetTableTypesReq(S))),
        ("GetColumns", lambda: client.GetColumns(ttypes.TGetColumnsReq(S))),
        ("GetFunctions", lambda: client.GetFunctions(ttypes.TGetFunctionsReq(S, functionName="%"))),
        ("GetPrimaryKeys", lambda: client.GetPrimaryKeys(ttypes.TGetPrimaryKeysReq(S))),
        ("GetCrossReference", lambda: client.GetCrossReference(ttypes.TGetCrossReferenceReq(S))),
        ("GetDelegationToken", lambda: client.GetDelegationToken(ttypes.TGetDelegationTokenReq(S, "a", "b"))),
        ("CancelDelegationToken", lambda: client.CancelDelegationToken(ttypes.TCancelDelegationTokenReq(S, "t"))),
        ("RenewDelegationToken", lambda: client.RenewDelegationToken(ttypes.TRenewDelegationTokenReq(S, "t"))),
        ("CloseSession", lambda: client.CloseSession(ttypes.TCloseSessionReq(S))),
    ]


@pytest.fixture
def relayed(monkeypatch):
    """Every message relayed to the Spark Thrift Server, as (user, bytes)."""
    seen = []
    relay = gateway_connection.Connection._relay

    def recording(self, msg):
        seen.append((self.user, msg.data))
        return relay(self, msg)

    monkeypatch.setattr(gateway_connection.Connection, "_relay", recording)
    return seen


@pytest.mark.integration
def test_a_reader_cannot_use_an_admins_session_or_operation(auth_gateway, relayed):
    admin = login(auth_gateway, "ann")
    reader = login(auth_gateway, "rita")
    try:
        owner = admin.cursor()
        owner.execute("SELECT id FROM range(10) ORDER BY id")
        assert owner.fetchmany(3) == [(0,), (1,), (2,)]
        session, operation = admin._sessionHandle, owner._operationHandle
        # A metadata call's operation too (the gateway learns those from the backend's reply).
        tables = admin._client.GetTables(ttypes.TGetTablesReq(session, schemaName="default"))
        assert tables.status.statusCode == SUCCESS
        # The reader holds a session of its own, so it is not refused for want of one.
        reader.cursor().execute("SELECT 1")
        thief = reader._client
        for name, call in foreign_calls(thief, session, operation):
            response = call()
            refused(response.status, INVALID_OPERATION if "Operation" in name or name.startswith(
                ("Fetch", "GetResultSet", "GetLog")) else INVALID_SESSION)
        refused(thief.FetchResults(ttypes.TFetchResultsReq(tables.operationHandle, FETCH_NEXT, 10)).status,
                INVALID_OPERATION)
        # A handle with the right guid and a made-up secret is not the owner's either.
        forged = ttypes.TOperationHandle(ttypes.THandleIdentifier(operation.operationId.guid, b"x" * 16),
                                         operation.operationType, operation.hasResultSet)
        refused(admin._client.FetchResults(ttypes.TFetchResultsReq(forged, FETCH_NEXT, 10)).status, INVALID_OPERATION)
        # Nothing of the reader's carried the admin's handles to Spark.
        guids = (session.sessionId.guid, operation.operationId.guid, tables.operationHandle.operationId.guid)
        assert not [data for user, data in relayed if user == "rita" and any(g in data for g in guids)]
        # The owner's operation and session are untouched: the rest of its rows, more statements.
        assert owner.fetchall() == [(i,) for i in range(3, 10)]
        status = admin._client.GetOperationStatus(ttypes.TGetOperationStatusReq(operation))
        assert status.operationState == ttypes.TOperationState.FINISHED_STATE
        fetched = admin._client.FetchResults(ttypes.TFetchResultsReq(tables.operationHandle, FETCH_NEXT, 10))
        assert fetched.status.statusCode == SUCCESS
        owner.execute("SELECT 2")
        assert owner.fetchall() == [(2,)]
        # And the reader's own session still works.
        mine = reader.cursor()
        mine.execute("SELECT 3")
        assert mine.fetchall() == [(3,)]
    finally:
        reader.close()
        admin.close()


@pytest.mark.integration
def test_get_query_id_and_set_client_info_with_another_connections_handles(auth_gateway, relayed):
    owner, thief = Raw(auth_gateway.port, "ann"), Raw(auth_gateway.port, "rita")
    try:
        session = owner.open_session().sessionHandle
        _, response = owner.call(execute_args(session, "SELECT 1"))
        operation = response.operationHandle
        thief.open_session()
        mtype, error = call_unstubbed(thief, get_query_id(operation))
        assert mtype == TMessageType.EXCEPTION and error.type == TApplicationException.INTERNAL_ERROR
        assert error.message.startswith(INVALID_OPERATION)
        mtype, status = call_unstubbed(thief, set_client_info(session, {"ApplicationName": "x"}))
        assert mtype == TMessageType.REPLY
        refused(status, INVALID_SESSION)
        assert not [d for u, d in relayed if u == "rita" and operation.operationId.guid in d]
        _, response = owner.call(execute_args(session, "SELECT 2"))
        assert response.status.statusCode == SUCCESS
    finally:
        owner.close()
        thief.close()


@pytest.mark.integration
def test_a_closed_session_and_its_operations_are_refused_afterwards(auth_gateway):
    raw = Raw(auth_gateway.port, "rita")
    try:
        first = raw.open_session().sessionHandle
        _, response = raw.call(execute_args(first, "SELECT 1"))
        operation = response.operationHandle
        second = raw.open_session().sessionHandle  # another session of the same connection is fine
        _, response = raw.call(execute_args(second, "SELECT 2"))
        assert response.status.statusCode == SUCCESS
        from TCLIService import TCLIService

        from tierlake.server.gateway.transport.protocol import encode_message
        closed = raw.call(encode_message("CloseSession", TMessageType.CALL, 3,
                                         TCLIService.CloseSession_args(ttypes.TCloseSessionReq(first))))[1]
        assert closed.status.statusCode == SUCCESS
        refused(raw.call(execute_args(first, "SELECT 1"))[1].status, INVALID_SESSION)
        _, status = raw.call(encode_message("GetOperationStatus", TMessageType.CALL, 4,
                                            TCLIService.GetOperationStatus_args(
                                                ttypes.TGetOperationStatusReq(operation))))
        refused(status.status, INVALID_OPERATION)
        assert raw.call(execute_args(second, "SELECT 3"))[1].status.statusCode == SUCCESS
    finally:
        raw.close()


# -- development mode, fake backend: the same rule, and nothing reaches the backend ----------

class RecordingHiveServer(FakeHiveServer):
    """The fake HiveServer2, remembering the guid of every handle it was asked about."""

    def __init__(self):
        super().__init__()
        self.seen: list[bytes] = []

    def __getattribute__(self, name):
        method = super().__getattribute__(name)
        if not name[:1].isupper() or name == "OpenSession":
            return method

        def recorded(req):
            for field in ("sessionHandle", "operationHandle"):
                handle = getattr(req, field, None)
                if handle is not None:
                    ident = handle.sessionId if field == "sessionHandle" else handle.operationId
                    self.seen.append(ident.guid)
            return method(req)
        return recorded


@pytest.fixture
def recording_gateway():
    fake = RecordingHiveServer()
    with serving(fake) as port, Gateway(GatewaySettings(backend_port=port, auth="NOSASL"), ToyHandler()) as gw:
        yield gw, fake


def test_development_mode_refuses_foreign_handles_too(recording_gateway):
    gw, fake = recording_gateway
    owner, thief = RawClient(gw, user="alice"), RawClient(gw, user="bob")
    try:
        relayed_op = owner.execute("SELECT 1").operationHandle  # the fake backend's
        local_op = owner.execute("CALL TOY.ROWS(3)").operationHandle  # the gateway's own
        fake.seen.clear()
        for _name, call in foreign_calls(thief.client, owner.session, relayed_op):
            response = call()
            refused(response.status, "Invalid ")
        refused(thief.fetch(local_op).status, INVALID_OPERATION)
        assert fake.seen == []  # not one of them reached the backend
        # The owner's handles still work, and so do the thief's own.
        assert owner.client.GetOperationStatus(
            ttypes.TGetOperationStatusReq(relayed_op)).status.statusCode == SUCCESS
        assert len(owner.fetch(local_op).results.columns[1].i64Val.values) == 3
        assert thief.execute("SELECT 1").status.statusCode == SUCCESS
        # Closed, an operation's handle is no longer the owner's either.
        assert owner.client.CloseOperation(ttypes.TCloseOperationReq(relayed_op)).status.statusCode == SUCCESS
        refused(owner.client.GetOperationStatus(ttypes.TGetOperationStatusReq(relayed_op)).status,
                INVALID_OPERATION)
    finally:
        owner.close()
        thief.close()
