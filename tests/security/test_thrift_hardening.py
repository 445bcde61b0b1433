"""What the gateway cannot check, it refuses: Thrift messages that are not
CALLs, requests the stubs cannot decode, hostile OpenSession
configurations, oversized statements; and nobody reaches the internal Spark
Thrift Server without the gateway's secret. The gateway goes on serving."""

from __future__ import annotations

import socket
import struct
import uuid

import pytest
from pyhive import exc, hive
from TCLIService import TCLIService, ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TMessageType
from thrift.transport.TTransport import TMemoryBuffer

from tests.security.conftest import PASSWORD
from tierlake.server.gateway.protocol import encode_message
from tierlake.server.gateway.sasl import COMPLETE, OK, START

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
