"""Schema-less message framing: exact bytes, binary-safe skipping, bad input."""

from __future__ import annotations

import socket
import struct

import pytest
from TCLIService import TCLIService, ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.protocol.TProtocol import TProtocolException
from thrift.Thrift import TMessageType, TType
from thrift.transport.TTransport import TMemoryBuffer, TTransportException

from tierlake.server.gateway.transport.protocol import (
    MessageReader,
    RecordingTransport,
    SocketTransport,
    decode_body,
    encode_reply,
    error_status,
)


class Chunked(TMemoryBuffer):
    """A transport that hands out at most 3 bytes per read, like a slow socket."""

    def read(self, sz):
        return super().read(min(sz, 3))

    def readAll(self, sz):
        out = b""
        while len(out) < sz:
            chunk = self.read(sz - len(out))
            if not chunk:
                raise EOFError()
            out += chunk
        return out


def encode_call(name: str, args, seqid: int = 7) -> bytes:
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin(name, TMessageType.CALL, seqid)
    args.write(proto)
    proto.writeMessageEnd()
    return buf.getvalue()


def unknown_rpc(guid: bytes) -> bytes:
    """A GetQueryId call (absent from PyHive's stubs) with a binary guid,
    plus a list<i64>, a map and a nested list to exercise skipping."""
    buf = TMemoryBuffer()
    p = TBinaryProtocol(buf)
    p.writeMessageBegin("GetQueryId", TMessageType.CALL, 42)
    p.writeStructBegin("args")
    p.writeFieldBegin("req", TType.STRUCT, 1)
    p.writeStructBegin("req")
    p.writeFieldBegin("guid", TType.STRING, 1)
    p.writeBinary(guid)
    p.writeFieldEnd()
    p.writeFieldBegin("numbers", TType.LIST, 2)
    p.writeListBegin(TType.I64, 3)
    for value in (1, -2, 3):
        p.writeI64(value)
    p.writeListEnd()
    p.writeFieldBegin("conf", TType.MAP, 3)
    p.writeMapBegin(TType.STRING, TType.I32, 1)
    p.writeString("k")
    p.writeI32(5)
    p.writeMapEnd()
    p.writeFieldBegin("nested", TType.LIST, 4)
    p.writeListBegin(TType.LIST, 1)
    p.writeListBegin(TType.STRING, 2)
    p.writeBinary(b"\xff")
    p.writeBinary(b"")
    p.writeListEnd()
    p.writeListEnd()
    p.writeFieldStop()
    p.writeStructEnd()
    p.writeFieldEnd()
    p.writeFieldStop()
    p.writeStructEnd()
    p.writeMessageEnd()
    return buf.getvalue()


def test_unknown_rpc_with_binary_fields_is_read_byte_for_byte():
    raw = unknown_rpc(b"\xff\xfe\x00\x80" * 4)
    trailing = encode_call("GetInfo", TCLIService.GetInfo_args(req=ttypes.TGetInfoReq()))
    reader = MessageReader(Chunked(raw + trailing))
    msg = reader.read()
    assert (msg.name, msg.mtype, msg.seqid) == ("GetQueryId", TMessageType.CALL, 42)
    assert msg.data == raw
    assert msg.data[:msg.header_len] + msg.body == raw
    following = reader.read()
    assert following.name == "GetInfo" and following.data == trailing
    assert reader.read() is None  # clean EOF between messages


def test_known_message_decodes_with_pyhive_stubs():
    req = ttypes.TExecuteStatementReq(
        sessionHandle=ttypes.TSessionHandle(ttypes.THandleIdentifier(b"\x00" * 16, b"\x01" * 16)),
        statement="CALL sys.version()", runAsync=True)
    raw = encode_call("ExecuteStatement", TCLIService.ExecuteStatement_args(req=req))
    msg = MessageReader(TMemoryBuffer(raw)).read()
    decoded = decode_body(msg, TCLIService.ExecuteStatement_args).req
    assert decoded.statement == "CALL sys.version()" and decoded.runAsync is True


def test_truncated_message_raises_instead_of_returning_none():
    raw = unknown_rpc(b"guid")
    with pytest.raises((TTransportException, EOFError)):
        MessageReader(TMemoryBuffer(raw[:-3])).read()


def test_unversioned_or_garbage_header_is_rejected():
    old_style = struct.pack(">i", 11) + b"OpenSession" + b"\x01" + struct.pack(">i", 1)
    with pytest.raises(TProtocolException):
        MessageReader(TMemoryBuffer(old_style + b"\x00")).read()
    with pytest.raises(TProtocolException):
        MessageReader(TMemoryBuffer(b"\x80\x02\x00\x01" + b"\x00" * 20)).read()


def test_message_size_limit():
    raw = encode_call("ExecuteStatement", TCLIService.ExecuteStatement_args(
        req=ttypes.TExecuteStatementReq(statement="x" * 5000)))
    with pytest.raises(TTransportException) as info:
        MessageReader(TMemoryBuffer(raw), max_message_size=1024).read()
    assert info.value.type == TTransportException.SIZE_LIMIT


def test_nesting_limit():
    # 100 nested lists of lists: deeper than any HS2 message.
    body = b"".join(bytes([TType.LIST]) + struct.pack(">i", 1) for _ in range(100))
    raw = (struct.pack(">I", 0x80010001) + struct.pack(">i", 1) + b"X" + struct.pack(">i", 1)
           + bytes([TType.LIST]) + struct.pack(">h", 1) + body)
    with pytest.raises(TProtocolException):
        MessageReader(TMemoryBuffer(raw + b"\x00" * 64)).read()


def test_recording_transport_take_resets():
    rec = RecordingTransport(TMemoryBuffer(b"abcdef"))
    assert rec.readAll(2) == b"ab"
    assert rec.read(3) == b"cde"
    assert rec.size == 5
    assert rec.take() == b"abcde"
    assert rec.size == 0


def test_socket_transport_buffers_reads_and_flushes_writes():
    a, b = socket.socketpair()
    try:
        transport = SocketTransport(a)
        b.sendall(b"0123456789")
        assert transport.readAll(4) == b"0123"
        assert transport.read(100) == b"456789"
        transport.write(b"x")
        transport.write(b"yz")
        transport.flush()
        assert b.recv(10) == b"xyz"
        b.close()
        with pytest.raises(TTransportException):
            transport.read(1)
    finally:
        a.close()


def test_encode_reply_keeps_seqid_and_status():
    resp = ttypes.TExecuteStatementResp(status=error_status("boom", "42883", 2002))
    raw = encode_reply("ExecuteStatement", 99, TCLIService.ExecuteStatement_result(success=resp))
    msg = MessageReader(TMemoryBuffer(raw)).read()
    assert (msg.name, msg.mtype, msg.seqid) == ("ExecuteStatement", TMessageType.REPLY, 99)
    status = decode_body(msg, TCLIService.ExecuteStatement_result).success.status
    assert (status.statusCode, status.sqlState, status.errorCode, status.errorMessage) == (
        ttypes.TStatusCode.ERROR_STATUS, "42883", 2002, "boom")


def test_read_ahead_is_kept_for_the_next_message():
    first = encode_call("GetInfo", TCLIService.GetInfo_args(req=ttypes.TGetInfoReq()), seqid=1)
    second = unknown_rpc(b"\x00\xff")
    a, b = socket.socketpair()
    try:
        b.sendall(first + second[:10])  # one recv returns all of this
        reader = MessageReader(SocketTransport(a))
        assert reader.read().data == first
        b.sendall(second[10:])
        b.close()
        assert reader.read().data == second
        assert reader.read() is None
    finally:
        a.close()
