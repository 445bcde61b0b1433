"""What the gateway cannot check, it refuses: Thrift messages that are not
CALLs, methods it does not know, requests it cannot decode (the stubs', and
the hand-written structs of GetQueryId and SetClientInfo), hostile
OpenSession configurations, oversized statements; SetClientInfo, which
Spark only logs, is answered by the gateway and changes nothing; and nobody
reaches the internal Spark Thrift Server without the gateway's secret. The
gateway goes on serving."""

from __future__ import annotations

import socket
import struct
import uuid

import pytest
from pyhive import exc, hive
from TCLIService import TCLIService, ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TApplicationException, TMessageType, TType
from thrift.transport.TTransport import TMemoryBuffer

from tests.security.conftest import PASSWORD
from tierlake.server.gateway.transport.protocol import encode_message
from tierlake.server.gateway.transport.sasl import COMPLETE, OK, START

pytestmark = pytest.mark.integration
V10 = ttypes.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V10


class Raw:
    """A SASL PLAIN client that sends hand-made Thrift messages."""

    def __init__(self, port: int, user: str = "rita", password: str | None = None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        token = b"\0" + user.encode() + b"\0" + (password or PASSWORD[user]).encode()
        self.sock.sendall(struct.pack(">BI", START, 5) + b"PLAIN" + struct.pack(">BI", OK, len(token)) + token)
        status, length = struct.unpack(">BI", self._recv(5))
        self._recv(length)
        assert status == COMPLETE

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def call(self, data: bytes):
        """(message type, decoded result or exception) of the reply to ``data``; None when closed."""
        self.sock.sendall(struct.pack(">I", len(data)) + data)
        try:
            (length,) = struct.unpack(">I", self._recv(4))
            reply = self._recv(length)
        except (ConnectionError, OSError):
            return None
        proto = TBinaryProtocol(TMemoryBuffer(reply))
        name, mtype, _ = proto.readMessageBegin()
        if mtype == TMessageType.EXCEPTION:
            from thrift.Thrift import TApplicationException
            error = TApplicationException()
            error.read(proto)
            return mtype, error
        result = getattr(TCLIService, f"{name}_result")()
        result.read(proto)
        return mtype, result.success

    def open_session(self, configuration=None):
        args = TCLIService.OpenSession_args(ttypes.TOpenSessionReq(client_protocol=V10, configuration=configuration))
        return self.call(encode_message("OpenSession", TMessageType.CALL, 1, args))[1]

    def close(self):
        self.sock.close()


def execute_args(session, statement: str, overlay=None) -> bytes:
    args = TCLIService.ExecuteStatement_args(ttypes.TExecuteStatementReq(session, statement, overlay))
    return encode_message("ExecuteStatement", TMessageType.CALL, 2, args)


def still_serving(gw) -> None:
    with hive.connect("127.0.0.1", gw.port, username="rita", password=PASSWORD["rita"], auth="CUSTOM") as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT 1")
        assert cursor.fetchall() == [(1,)]


@pytest.fixture(scope="module")
def canary(spark):
    db = "thr_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {db}.canary (id INT) USING iceberg")
    yield f"{db}.canary"
    spark.sql(f"DROP DATABASE {db} CASCADE")


@pytest.mark.parametrize("mtype", [TMessageType.REPLY, TMessageType.EXCEPTION, TMessageType.ONEWAY])
def test_messages_that_are_not_calls_are_refused(auth_gateway, spark, canary, mtype):
    raw = Raw(auth_gateway.port)
    session = raw.open_session().sessionHandle
    data = execute_args(session, f"DROP TABLE {canary}")
    header_end = data.index(b"ExecuteStatement") - 8
    # strict header: version | type in the low byte
    data = data[:header_end + 3] + bytes([mtype]) + data[header_end + 4:]
    reply = raw.call(data)
    assert reply is None or reply[0] == TMessageType.EXCEPTION
    raw.close()
    assert spark.catalog.tableExists(canary)
    still_serving(auth_gateway)


def test_requests_the_stubs_cannot_decode_are_refused(auth_gateway, spark, canary):
    raw = Raw(auth_gateway.port)
    session = raw.open_session().sessionHandle
    # A \xff byte in the statement (Java would decode it leniently).
    data = execute_args(session, f"DROP TABLE {canary} -- PLACEHOLDER")
    bad = data.replace(b"PLACEHOLDER", b"\xffLACEHOLDE\xff")
    for request in (
        bad,
        # ... in confOverlay
        execute_args(session, "SELECT 1", {"spark.sql.ansi.enabled": "PLACEHOLDER"}).replace(
            b"PLACEHOLDER", b"\xff" * 11),
        # an unknown field in the request struct, and in the arguments struct
        data[:-2] + b"\x0b\x00\x63" + struct.pack(">I", 4) + b"DROP" + data[-2:],
        data[:-1] + b"\x0b\x00\x63" + struct.pack(">I", 4) + b"DROP" + data[-1:],
        # a known field with another type
        data[:-1] + b"\x08\x00\x01" + struct.pack(">i", 7) + data[-1:],
    ):
        mtype, response = raw.call(request)
        assert mtype == TMessageType.REPLY
        assert response.status.statusCode == ttypes.TStatusCode.ERROR_STATUS
        assert response.status.sqlState == "08P01" and "cannot decode" in response.status.errorMessage
    # The connection itself goes on.
    mtype, response = raw.call(execute_args(session, "SELECT 1"))
    assert response.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
    raw.close()
    assert spark.catalog.tableExists(canary)
    still_serving(auth_gateway)


@pytest.mark.parametrize("configuration", [
    {"set:hiveconf:spark.sql.catalog.x": "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"},
    {"set:system:tierlake.attack": "1"},
    {"set:hivevar:x": "1"},
    {"use:database": "sys; DROP TABLE x"},
    {"use:database": "default -- x"},
    {"set:hiveconf:spark.sql.variable.substitute": "true"},
    {"hive.server2.proxy.user": "ann"},
])
def test_hostile_session_configuration_is_refused(auth_gateway, spark, configuration):
    raw = Raw(auth_gateway.port)
    response = raw.open_session(configuration)
    assert response.status.statusCode == ttypes.TStatusCode.ERROR_STATUS
    assert response.status.sqlState == "42501" and "not allowed in a session's configuration" in \
        response.status.errorMessage
    raw.close()
    assert spark.sparkContext._jvm.java.lang.System.getProperty("tierlake.attack") is None
    still_serving(auth_gateway)


def test_allowed_session_configuration_and_the_current_database_from_spark(auth_gateway):
    raw = Raw(auth_gateway.port, "will")
    response = raw.open_session({"use:database": "`sys`",
                                 "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size": "1000"})
    assert response.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
    # The database is Spark's session's, however it was named: an unqualified write lands in sys.
    insert = "INSERT INTO tiering_tables SELECT * FROM tiering_tables"
    _, result = raw.call(execute_args(response.sessionHandle, insert))
    assert result.status.sqlState == "42501" and "on sys tables" in result.status.errorMessage
    _, result = raw.call(execute_args(response.sessionHandle, "SELECT 1", {"spark.sql.extensions": "x"}))
    assert result.status.sqlState == "42501" and "confOverlay" in result.status.errorMessage
    raw.close()


def test_statement_size_limit(auth_gateway):
    with hive.connect("127.0.0.1", auth_gateway.port, username="rita", password=PASSWORD["rita"],
                      auth="CUSTOM") as conn:
        cursor = conn.cursor()
        with pytest.raises(exc.OperationalError) as info:
            cursor.execute("SELECT '" + "x" * (1024 * 1024) + "'")
        status = info.value.args[0].status
        assert status.sqlState == "54000"
        assert "tierlake.gateway.max-statement-size is 1048576 bytes" in status.errorMessage
        cursor.execute("SELECT 2")
        assert cursor.fetchall() == [(2,)]


def test_the_internal_thrift_server_takes_only_the_gateway(server):
    with pytest.raises(Exception):  # noqa: B017 - NOSASL: the server drops the connection
        hive.connect("127.0.0.1", server.thrift_port, username="mallory", auth="NOSASL").cursor().execute("SELECT 1")
    for password in ("", "guess", server.internal_secret[:-1]):
        with pytest.raises(Exception, match="accepts only the tierlake gateway|Error validating|closed|read 0 bytes"):
            hive.connect("127.0.0.1", server.thrift_port, username="mallory", password=password or "x",
                         auth="CUSTOM")
    # The secret is what makes the difference.
    with hive.connect("127.0.0.1", server.thrift_port, username="gateway", password=server.internal_secret,
                      auth="CUSTOM") as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT 3")
        assert cursor.fetchall() == [(3,)]


def test_a_method_the_gateway_does_not_know_is_refused(auth_gateway, spark, canary):
    raw = Raw(auth_gateway.port)
    session = raw.open_session().sessionHandle
    # An ExecuteStatement's body under a name no stub has: libthrift would dispatch by name.
    args = TCLIService.ExecuteStatement_args(ttypes.TExecuteStatementReq(session, f"DROP TABLE {canary}"))
    mtype, error = raw.call(encode_message("UnknownMethod", TMessageType.CALL, 3, args))
    assert mtype == TMessageType.EXCEPTION and error.type == TApplicationException.UNKNOWN_METHOD
    mtype, response = raw.call(execute_args(session, "SELECT 1"))  # the connection goes on
    assert response.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
    raw.close()
    assert spark.catalog.tableExists(canary)
    still_serving(auth_gateway)


def attack_properties(spark) -> list[str]:
    names = spark.sparkContext._jvm.java.lang.System.getProperties().stringPropertyNames()
    return [str(n) for n in names if str(n).startswith("tierlake.attack")]


def test_an_undecodable_open_session_is_refused(auth_gateway, spark):
    raw = Raw(auth_gateway.port)
    args = TCLIService.OpenSession_args(ttypes.TOpenSessionReq(
        client_protocol=V10, configuration={"set:system:tierlake.attackPLACEHOLDER": "1"}))
    data = encode_message("OpenSession", TMessageType.CALL, 1, args).replace(b"PLACEHOLDER", b"\xff" * 11)
    mtype, response = raw.call(data)
    assert mtype == TMessageType.REPLY
    assert response.status.statusCode == ttypes.TStatusCode.ERROR_STATUS and response.status.sqlState == "08P01"
    assert attack_properties(spark) == []
    assert raw.open_session().status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS  # the connection goes on
    raw.close()
    still_serving(auth_gateway)


def set_client_info(session, configuration: dict[str, str], seqid: int = 7) -> bytes:
    """A SetClientInfo call (PyHive's stubs lack it), written field by field."""
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin("SetClientInfo", TMessageType.CALL, seqid)
    proto.writeStructBegin("SetClientInfo_args")
    proto.writeFieldBegin("req", TType.STRUCT, 1)
    proto.writeStructBegin("TSetClientInfoReq")
    proto.writeFieldBegin("sessionHandle", TType.STRUCT, 1)
    session.write(proto)
    proto.writeFieldEnd()
    proto.writeFieldBegin("configuration", TType.MAP, 2)
    proto.writeMapBegin(TType.STRING, TType.STRING, len(configuration))
    for key, value in configuration.items():
        proto.writeString(key)
        proto.writeString(value)
    proto.writeMapEnd()
    proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeMessageEnd()
    return buf.getvalue()


def call_unstubbed(raw: Raw, data: bytes):
    """(message type, TStatus or TApplicationException) of the reply to a SetClientInfo."""
    raw.sock.sendall(struct.pack(">I", len(data)) + data)
    (length,) = struct.unpack(">I", raw._recv(4))
    proto = TBinaryProtocol(TMemoryBuffer(raw._recv(length)))
    _, mtype, _ = proto.readMessageBegin()
    if mtype == TMessageType.EXCEPTION:
        error = TApplicationException()
        error.read(proto)
        return mtype, error
    status = None
    proto.readStructBegin()  # SetClientInfo_result
    _, ftype, fid = proto.readFieldBegin()
    if ftype == TType.STRUCT and fid == 0:
        proto.readStructBegin()  # TSetClientInfoResp
        _, ftype, fid = proto.readFieldBegin()
        if ftype == TType.STRUCT and fid == 1:
            status = ttypes.TStatus()
            status.read(proto)
    return mtype, status


HOSTILE_CLIENT_INFO = {
    "set:system:tierlake.attack": "1",
    "set:hiveconf:spark.sql.catalog.evil": "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
    "set:hiveconf:spark.sql.variable.substitute": "true",
    "use:database": "sys",
    "ApplicationName": "forged\nINFO a log line of its own",
}


def test_set_client_info_changes_nothing(auth_gateway, spark):
    raw = Raw(auth_gateway.port, "will")
    handle = raw.open_session().sessionHandle
    mtype, status = call_unstubbed(raw, set_client_info(handle, HOSTILE_CLIENT_INFO))
    assert mtype == TMessageType.REPLY and status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS  # as Spark answers
    jsession = auth_gateway.authorizer.sessions.session(handle.sessionId.guid, handle.sessionId.secret)
    assert not jsession.conf().contains("spark.sql.catalog.evil")
    assert jsession.conf().get("spark.sql.variable.substitute") == "false"
    assert str(jsession.catalog().currentDatabase()) == "default"
    assert attack_properties(spark) == []
    # Undecodable (a \xff in a key): refused, and the connection goes on.
    bad = set_client_info(handle, {"ApplicationNamePLACEHOLDER": "x"}).replace(b"PLACEHOLDER", b"\xff" * 11)
    mtype, error = call_unstubbed(raw, bad)
    assert mtype == TMessageType.EXCEPTION and error.type == TApplicationException.PROTOCOL_ERROR
    _, result = raw.call(execute_args(handle, "SELECT 1"))
    assert result.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
    raw.close()
    still_serving(auth_gateway)


def get_query_id(operation_handle, extra_field: bool = False) -> bytes:
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin("GetQueryId", TMessageType.CALL, 9)
    proto.writeStructBegin("GetQueryId_args")
    proto.writeFieldBegin("req", TType.STRUCT, 1)
    proto.writeStructBegin("TGetQueryIdReq")
    proto.writeFieldBegin("operationHandle", TType.STRUCT, 1)
    operation_handle.write(proto)
    proto.writeFieldEnd()
    if extra_field:  # a field the IDL does not have: Java would skip it, the gateway cannot check it
        proto.writeFieldBegin("x", TType.STRING, 99)
        proto.writeString("DROP TABLE x")
        proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeMessageEnd()
    return buf.getvalue()


def test_get_query_id_is_decoded_before_it_is_relayed(auth_gateway):
    raw = Raw(auth_gateway.port)
    session = raw.open_session().sessionHandle
    _, response = raw.call(execute_args(session, "SELECT 1"))
    operation = response.operationHandle
    mtype, error = call_unstubbed(raw, get_query_id(operation, extra_field=True))
    assert mtype == TMessageType.EXCEPTION and error.type == TApplicationException.PROTOCOL_ERROR
    _, response = raw.call(execute_args(session, "SELECT 2"))  # the connection goes on
    assert response.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
    # A decodable one is Spark's to answer (it reads the operation's query id; it may fail): harmless.
    data = get_query_id(operation)
    raw.sock.sendall(struct.pack(">I", len(data)) + data)
    try:
        (length,) = struct.unpack(">I", raw._recv(4))
        name, mtype, _ = TBinaryProtocol(TMemoryBuffer(raw._recv(length))).readMessageBegin()
        assert name == "GetQueryId" and mtype in (TMessageType.REPLY, TMessageType.EXCEPTION)
    except (ConnectionError, OSError):
        pass  # Spark could not write its answer and dropped the link: only this connection ends
    raw.close()
    still_serving(auth_gateway)
