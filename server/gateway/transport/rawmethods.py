"""``GetQueryId`` and ``SetClientInfo``: the HiveServer2 methods clients send
that PyHive's stubs lack (Hive JDBC 3+ sends ``SetClientInfo`` for
``Connection.setClientInfo``).

With a password file the gateway decodes them as strictly as every other
request (the structs below follow Hive's ``TCLIService.thrift``), so a request
it cannot read completely is refused instead of relayed for Java to decode
leniently.

What Spark 3.5's Thrift server does with them (``ThriftCLIService``):
``GetQueryId`` reads the query id of an operation whose handle (id and
secret) the client holds, and is relayed. ``SetClientInfo`` changes nothing:
it logs its ``configuration`` map (``Client information for <session>: k =
v, …``) and answers success, whatever the keys say. The gateway answers it
the same way itself, so a client's text does not reach Spark's log.

Both name a handle (``session_handle``, ``operation_handle``), which the
gateway checks is the caller's own like every other request's
(requestcheck.named_handle).
"""

from __future__ import annotations

from typing import Any

from TCLIService import ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.protocol.TProtocol import TProtocolException
from thrift.Thrift import TMessageType, TType
from thrift.transport.TTransport import TMemoryBuffer

from tierlake.server.gateway.transport.protocol import ok_status


def _read_fields(iprot, fields: dict[int, tuple[int, Any]]) -> dict[int, Any]:
    """The fields of one struct, ``fields``: id → (type, reader). Others go
    to ``iprot.skip`` (which a strict protocol refuses)."""
    values = {}
    iprot.readStructBegin()
    while True:
        _, ftype, fid = iprot.readFieldBegin()
        if ftype == TType.STOP:
            break
        expected = fields.get(fid)
        if expected is not None and expected[0] == ftype:
            values[fid] = expected[1](iprot)
        else:
            iprot.skip(ftype)
        iprot.readFieldEnd()
    iprot.readStructEnd()
    return values


def _stub(cls):
    def read(iprot):
        obj = cls()
        obj.read(iprot)
        return obj
    return read


def _string_map(iprot) -> dict[str, str]:
    ktype, vtype, size = iprot.readMapBegin()
    if size and (ktype != TType.STRING or vtype != TType.STRING):
        raise TProtocolException(TProtocolException.INVALID_DATA, "configuration is not a map of strings")
    out = {iprot.readString(): iprot.readString() for _ in range(size)}
    iprot.readMapEnd()
    return out


class GetQueryIdArgs:
    """``GetQueryId(1: TGetQueryIdReq req)``, ``TGetQueryIdReq {1: TOperationHandle operationHandle}``."""

    def __init__(self):
        self.operation_handle = None

    def read(self, iprot) -> None:
        req = _read_fields(iprot, {1: (TType.STRUCT, lambda p: _read_fields(
            p, {1: (TType.STRUCT, _stub(ttypes.TOperationHandle))}))})
        self.operation_handle = req.get(1, {}).get(1)


class SetClientInfoArgs:
    """``SetClientInfo(1: TSetClientInfoReq req)``, ``TSetClientInfoReq
    {1: TSessionHandle sessionHandle, 2: optional map<string, string> configuration}``."""

    def __init__(self):
        self.session_handle = None
        self.configuration: dict[str, str] = {}

    def read(self, iprot) -> None:
        req = _read_fields(iprot, {1: (TType.STRUCT, lambda p: _read_fields(
            p, {1: (TType.STRUCT, _stub(ttypes.TSessionHandle)), 2: (TType.MAP, _string_map)}))})
        fields = req.get(1, {})
        self.session_handle = fields.get(1)
        self.configuration = fields.get(2, {})


ARGS = {"GetQueryId": GetQueryIdArgs, "SetClientInfo": SetClientInfoArgs}


def set_client_info_reply(seqid: int, status: ttypes.TStatus | None = None) -> bytes:
    """What Spark answers every ``SetClientInfo``: ``TSetClientInfoResp(status=SUCCESS)``;
    with ``status``, that status instead (the gateway's refusal of a handle
    that is not the caller's: the one reply of this method that can carry a
    SQL error)."""
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin("SetClientInfo", TMessageType.REPLY, seqid)
    proto.writeStructBegin("SetClientInfo_result")
    proto.writeFieldBegin("success", TType.STRUCT, 0)
    proto.writeStructBegin("TSetClientInfoResp")
    proto.writeFieldBegin("status", TType.STRUCT, 1)
    (status or ok_status()).write(proto)
    proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeMessageEnd()
    return buf.getvalue()
