"""Malformed Thrift/SASL/TLS input at the real gateway port: each bad client
costs only its own connection, and the next client is served."""

from __future__ import annotations

import random
import socket
import ssl
import struct
import threading
import time

import pytest
from pyhive import hive

from tierlake.server.gateway.transport.sasl import OK, START

pytestmark = [pytest.mark.load, pytest.mark.integration]


def frame(status: int, payload: bytes) -> bytes:
    return struct.pack(">BI", status, len(payload)) + payload


def plain_login(user: str = "fuzz", password: str = "x") -> bytes:
    return frame(START, b"PLAIN") + frame(OK, f"\0{user}\0{password}".encode())


def data_frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def thrift_header(name: bytes, seqid: int = 1) -> bytes:
    return b"\x80\x01\x00\x01" + struct.pack(">I", len(name)) + name + struct.pack(">i", seqid)


def _depth_bomb(depth: int) -> bytes:
    # field 1 of type STRUCT, nested ``depth`` times.
    return b"\x0c\x00\x01" * depth


def serves_a_new_client(port: int, **connect) -> None:
    """A fresh PyHive client runs a query; a hang fails the test instead of blocking it."""
    outcome = {}

    def run():
        try:
            conn = hive.connect("127.0.0.1", port, **{"username": "after-fuzz", **connect})
            cur = conn.cursor()
            cur.execute("SELECT 40 + 2")
            outcome["rows"] = cur.fetchall()
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported below
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the gateway did not serve the next client"
    assert outcome.get("rows") == [(42,)], outcome


def send(port: int, data: bytes, close: bool = True, read: bool = True) -> socket.socket:
    """Send ``data``; with ``read``, return once the gateway closed the connection."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if data:
        sock.sendall(data)
    if read:
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            raise AssertionError("the gateway left a bad connection open") from None
    if close:
        sock.close()
    return sock


def replies(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        return sock.recv(65536)


# What the gateway must do with each input: "close" it (after an error frame
# where the client can read one), "reply" (a Thrift answer, the connection
# stays), or "wait" for the rest (a client may be slow; the handshake has a
# deadline) -- the client gives up here.
CASES = {
    "connect-and-close": (b"", "wait"),
    "truncated-sasl-header": (bytes([START, 0, 0]), "wait"),
    "truncated-sasl-frame": (frame(START, b"PLAIN")[:7], "wait"),
    "bad-sasl-status": (b"\x07\x00\x00\x00\x05PLAIN", "close"),
    "huge-sasl-length": (struct.pack(">BI", START, 0xFFFFFFFF), "close"),
    "unknown-mechanism": (frame(START, b"GSSAPI"), "close"),
    "bad-status-after-start": (frame(START, b"PLAIN") + b"\xff" * 32, "close"),
    "huge-data-frame-length": (plain_login() + struct.pack(">I", 0xFFFFFFFF), "close"),
    "garbage-after-login": (plain_login() + data_frame(b"\x00garbage-not-thrift" * 4), "close"),
    "unversioned-thrift-header": (plain_login() + data_frame(b"\x00\x00\x00\x0bOpenSession\x01\x00\x00\x00\x01"),
                                  "close"),
    "huge-string-in-message": (plain_login() + data_frame(thrift_header(b"ExecuteStatement")
                                                          + b"\x0b\x00\x01\x7f\xff\xff\xff"), "close"),
    "huge-list-in-message": (plain_login() + data_frame(thrift_header(b"OpenSession")
                                                        + b"\x0f\x00\x01\x0b\x7f\xff\xff\xff"), "close"),
    "depth-bomb": (plain_login() + data_frame(thrift_header(b"OpenSession") + _depth_bomb(5000)), "close"),
    "unknown-field-type": (plain_login() + data_frame(thrift_header(b"OpenSession") + b"\x63\x00\x01"), "close"),
    "unknown-method": (plain_login() + data_frame(thrift_header(b"NoSuchMethod") + b"\x00"), "reply"),
    "nosasl-garbage": (b"\x80\x01\x00\x01\xff\xff\xff\xff" + b"x" * 64, "close"),
    "nosasl-huge-name": (b"\x80\x01\x00\x01\x7f\xff\xff\xff", "close"),
    "http-request": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "close"),
    "tls-client-hello-at-plain-port": (bytes.fromhex("16030100a5010000a10303") + b"\x00" * 64, "close"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_input_costs_only_its_connection(server, case):
    data, expect = CASES[case]
    if expect == "reply":
        assert replies(server.gateway.port, data)
    else:
        send(server.gateway.port, data, read=expect == "close")
    serves_a_new_client(server.gateway.port)


def test_random_bytes_and_half_open_connections(server):
    port = server.gateway.port
    baseline = server.gateway.connection_count
    rng = random.Random(8)
    for _ in range(40):
        blob = rng.randbytes(rng.randint(1, 600))
        if rng.random() < 0.5:
            blob = plain_login() + data_frame(blob) if rng.random() < 0.5 else plain_login() + blob
        send(port, blob, read=False)
    # Half-open: started and never finished, left open while others are served.
    idle = [send(port, data, close=False, read=False) for data in (
        b"", frame(START, b"PLAIN")[:3], plain_login(), plain_login() + struct.pack(">I", 1000) + b"\x80\x01")]
    try:
        serves_a_new_client(port)
        serves_a_new_client(port)
    finally:
        for sock in idle:
            sock.close()
    serves_a_new_client(port)
    # Every bad connection's thread ended (none leaked).
    deadline = time.monotonic() + 60
    while server.gateway.connection_count > baseline and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.gateway.connection_count <= baseline


def test_garbage_after_a_valid_open_session(server):
    """A real session, then garbage on the same connection: only that connection goes."""
    import thrift_sasl
    from pyhive.sasl_compat import PureSASLClient
    from TCLIService import TCLIService, ttypes
    from thrift.protocol.TBinaryProtocol import TBinaryProtocol
    from thrift.transport.TSocket import TSocket

    sock = TSocket("127.0.0.1", server.gateway.port)
    transport = thrift_sasl.TSaslClientTransport(
        lambda: PureSASLClient("127.0.0.1", username="fuzz", password="x"), "PLAIN", sock)
    transport.open()
    client = TCLIService.Client(TBinaryProtocol(transport))
    opened = client.OpenSession(ttypes.TOpenSessionReq(username="fuzz"))
    assert opened.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
    transport.write(b"\x80\x01\x00\x01\x00\x00\x00\x04Junk" + b"\xde\xad\xbe\xef" * 8)
    transport.flush()
    raw = sock.handle
    raw.settimeout(30)
    assert raw.recv(1) == b""  # closed by the gateway, not left hanging
    transport.close()
    serves_a_new_client(server.gateway.port)


def test_garbage_at_the_tls_and_auth_ports(tls_gateway, auth_gateway, tls_files):
    send(tls_gateway.port, b"\x01\x00\x00\x00\x05PLAIN" + b"\x00" * 300)  # plain SASL at a TLS port
    send(tls_gateway.port, bytes.fromhex("16030100a5010000a10303") + b"\x00" * 200)  # a broken ClientHello
    half_open = send(tls_gateway.port, b"", close=False, read=False)  # never starts TLS
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:  # TLS is fine, what follows is not
            tls.sendall(b"\xff" * 100)
            try:
                while tls.recv(1024):
                    pass
            except (OSError, ssl.SSLError):
                pass
    send(auth_gateway.port, plain_login("ann", "wrong") + b"\x00" * 16)
    refusal = replies(auth_gateway.port, thrift_header(b"OpenSession") + b"\x00")  # NOSASL, empty request
    assert b"Authentication required" in refusal and b"28000" in refusal
    serves_a_new_client(auth_gateway.port, username="rita", password="rita-pw", auth="CUSTOM")
    from tierlake_client.jdbc import connect

    with connect(f"jdbc:hive2://127.0.0.1:{tls_gateway.port}/default;ssl=true", "rita", "rita-pw",
                 ca_file=str(tls_files[0])) as conn:
        cur = conn.cursor()
        cur.execute("SELECT 40 + 2")
        assert cur.fetchall() == [(42,)]
    half_open.close()
