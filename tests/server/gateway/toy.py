"""A toy statement handler for the gateway tests: ``CALL TOY.<NAME>(<n>)``."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import socket
import threading
import time

from tierlake.server.exceptions import OperationCancelledError, SqlSyntaxError, UnknownProcedureError
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo, Statement
from tierlake.server.runtime import operations

ROWS_COLUMNS = [("name", "string"), ("n", "bigint"), ("ts", "timestamp"), ("nothing", "string")]
BASE_TS = dt.datetime(2024, 1, 2, 3, 4, 5)
_CALL = re.compile(r"^\s*CALL\s+TOY\.(\w+)\s*\(\s*(\d*)\s*\)\s*;?\s*(--.*)?$", re.IGNORECASE)


def toy_row(i: int) -> tuple:
    return (f"row{i}", i, BASE_TS + dt.timedelta(seconds=i, microseconds=250000 * (i % 4)), None)


def toy_ts_text(i: int) -> str:
    """How the gateway (and Spark) render toy_row(i)'s timestamp."""
    ts = toy_row(i)[2]
    text = ts.strftime("%Y-%m-%d %H:%M:%S")
    return text + f".{ts.microsecond:06d}".rstrip("0") if ts.microsecond else text


class ToyHandler:
    """ROWS(n): n rows of (string, bigint, timestamp, NULL); FAIL(): a
    TierlakeError; BOOM(): a plain exception; WHOAMI(): the session info;
    HUGE(): a bigint that cannot be encoded; BADTYPE(): an unsupported type;
    SLOW(s): one row after s seconds, unless cancelled first; SLOWFAIL(s):
    fails after s seconds."""

    def __init__(self):
        self.sessions: list[SessionInfo] = []
        self.cancelled: list[str] = []
        self._lock = threading.Lock()

    def route(self, statement: Statement) -> bool:
        if "WANTS_EXPLODES" in statement.text:
            raise RuntimeError("wants exploded")
        if statement.text.lstrip().upper().startswith("CALL TOY."):
            statement.route = "toy"
            return True
        return False

    def refused(self, statement: Statement) -> None:
        pass

    def session_closed(self, guid: bytes) -> None:
        pass

    def execute(self, statement: Statement) -> LocalResult:
        session, statement = statement.session, statement.text
        with self._lock:
            self.sessions.append(session)
        match = _CALL.match(statement)
        if not match:
            raise SqlSyntaxError(f"cannot parse {statement!r}")
        name, arg = match.group(1).upper(), match.group(2)
        if name == "ROWS":
            return LocalResult(ROWS_COLUMNS, [toy_row(i) for i in range(int(arg or 3))])
        if name == "FAIL":
            raise UnknownProcedureError("procedure toy.fail does not exist")
        if name == "BOOM":
            raise RuntimeError("kaboom")
        if name == "WHOAMI":
            return LocalResult([("user", "string"), ("protocol", "int"), ("address", "string")],
                               [(session.user, session.protocol_version, session.client_address)])
        if name in ("SLOW", "SLOWFAIL"):
            control = operations.current()
            deadline = time.monotonic() + int(arg or 3)
            while time.monotonic() < deadline:
                if control is not None and control.cancelled:
                    with self._lock:
                        self.cancelled.append(statement)
                    raise OperationCancelledError("toy statement cancelled")
                time.sleep(0.05)
            if name == "SLOWFAIL":
                raise UnknownProcedureError("slow failure")
            return LocalResult([("n", "bigint")], [(int(arg or 3),)])
        if name == "HUGE":
            return LocalResult([("n", "bigint")], [(1,), (1 << 70,)])
        if name == "BADTYPE":
            return LocalResult([("x", "geometry")], [("POINT(0 0)",)])
        raise UnknownProcedureError(f"procedure toy.{name.lower()} does not exist")


@contextlib.contextmanager
def serving(fake):
    """``fake`` (a TCLIService.Iface) as a Thrift backend on a loopback port, one thread per
    connection; yields the port."""
    from TCLIService import TCLIService
    from thrift.protocol.TBinaryProtocol import TBinaryProtocol

    from tierlake.server.gateway.transport.protocol import SocketTransport

    processor = TCLIService.Processor(fake)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn):
        proto = TBinaryProtocol(SocketTransport(conn))
        try:
            while True:
                processor.process(proto, proto)
        except Exception:  # noqa: BLE001 - any end of the client's stream ends this fake connection
            conn.close()

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
