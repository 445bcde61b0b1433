"""GetQueryId and SetClientInfo (absent from PyHive's stubs) are decoded as
strictly as every other request; the gateway's own SetClientInfo answer is
Spark's. No JVM: the integration side is in test_thrift_hardening.py."""

from __future__ import annotations

import pytest
from TCLIService import ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TMessageType, TType
from thrift.transport.TTransport import TMemoryBuffer

from tests.security.test_thrift_hardening import get_query_id, set_client_info
from tierlake.server.gateway.transport import rawmethods
from tierlake.server.gateway.transport.protocol import MessageReader, RawMessage, strict_decode

HANDLE = ttypes.TSessionHandle(ttypes.THandleIdentifier(b"g" * 16, b"s" * 16))
OPERATION = ttypes.TOperationHandle(ttypes.THandleIdentifier(b"o" * 16, b"p" * 16),
                                    ttypes.TOperationType.EXECUTE_STATEMENT, True)


def message(data: bytes) -> RawMessage:
    return MessageReader(TMemoryBuffer(data)).read()


def test_set_client_info_decodes_strictly():
    args = strict_decode(message(set_client_info(HANDLE, {"ApplicationName": "DBeaver"})),
                         rawmethods.SetClientInfoArgs)
    assert args.configuration == {"ApplicationName": "DBeaver"}
    assert args.session_handle.sessionId.guid == b"g" * 16
    bad = set_client_info(HANDLE, {"keyPLACEHOLDER": "x"}).replace(b"PLACEHOLDER", b"\xff" * 11)
    with pytest.raises(Exception, match="codec|decode|utf"):
        strict_decode(message(bad), rawmethods.SetClientInfoArgs)


def test_get_query_id_decodes_strictly():
    args = strict_decode(message(get_query_id(OPERATION)), rawmethods.GetQueryIdArgs)
    assert args.operation_handle.operationId.guid == b"o" * 16
    with pytest.raises(Exception, match="unknown field"):
        strict_decode(message(get_query_id(OPERATION, extra_field=True)), rawmethods.GetQueryIdArgs)


def test_the_gateways_set_client_info_answer_is_success():

    proto = TBinaryProtocol(TMemoryBuffer(rawmethods.set_client_info_reply(7)))
    name, mtype, seqid = proto.readMessageBegin()
    assert (name, mtype, seqid) == ("SetClientInfo", TMessageType.REPLY, 7)
    proto.readStructBegin()
    _, ftype, fid = proto.readFieldBegin()
    assert (ftype, fid) == (TType.STRUCT, 0)
    proto.readStructBegin()
    _, ftype, fid = proto.readFieldBegin()
    status = ttypes.TStatus()
    status.read(proto)
    assert (ftype, fid, status.statusCode) == (TType.STRUCT, 1, ttypes.TStatusCode.SUCCESS_STATUS)
