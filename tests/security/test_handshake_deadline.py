"""The TLS and SASL handshakes have one total deadline: a client trickling
one byte at a time cannot hold a connection slot past it (a per-read timeout
would let it, forever), and the gateway goes on serving other clients
meanwhile. No JVM: the backend is never reached."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time

import pytest

from tests.server.gateway.toy import ToyHandler
from tierlake.server.gateway.transport.sasl import COMPLETE, OK, START
from tierlake.server.gateway.transport.server import Gateway
from tierlake.server.gateway.transport.settings import GatewaySettings


def closed_while_trickling(port: int, data: bytes, pause: float) -> bool:
    """Send ``data`` a byte at a time; True when the gateway closed first."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        for byte in data:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return True
            time.sleep(pause)
            sock.setblocking(False)
            try:
                if sock.recv(1024) == b"":
                    return True
            except BlockingIOError:
                pass
            except OSError:
                return True
            finally:
                sock.setblocking(True)
        return False
    finally:
        sock.close()


def test_a_trickling_client_is_cut_off_at_the_deadline():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    mechanism = struct.pack(">BI", START, 5) + b"PLAIN"
    # 60 bytes, one every 0.1 s: each read waits far less than the deadline,
    # the whole handshake far more.
    trickle = mechanism + struct.pack(">BI", 2, 200) + b"\0user\0" + b"p" * 44
    with Gateway(GatewaySettings(backend_port=dead_port, handshake_timeout=1.0), ToyHandler()) as gw:
        assert closed_while_trickling(gw.port, trickle, 0.1)
        assert gw.connection_count == 0 or _eventually_zero(gw)
    with Gateway(GatewaySettings(backend_port=dead_port, handshake_timeout=60.0), ToyHandler()) as gw:
        # The same client is not cut off by a generous deadline: the cut above is the deadline's.
        assert not closed_while_trickling(gw.port, trickle[:20], 0.1)


def _eventually_zero(gw) -> bool:
    for _ in range(100):
        if gw.connection_count == 0:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def tls_server_context(tls_files):
    cert, key, _ = tls_files
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return context


def client_context(tls_files) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(tls_files[0]))
    context.check_hostname = False
    return context


def client_hello(tls_files) -> bytes:
    """The first flight of a real TLS client: its ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(tls_files).wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def logs_in(port: int, tls_files) -> bool:
    """A well-behaved client: TLS handshake, then SASL PLAIN up to the gateway's COMPLETE."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            client_context(tls_files).wrap_socket(raw, server_hostname="localhost") as tls:
        token = b"\0rita\0pw"
        tls.sendall(struct.pack(">BI", START, 5) + b"PLAIN" + struct.pack(">BI", OK, len(token)) + token)
        header = tls.recv(5)
        return len(header) == 5 and header[0] == COMPLETE


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_client_trickling_its_tls_hello_is_cut_off_at_the_deadline(tls_files, tls_server_context):
    hello = client_hello(tls_files)
    assert len(hello) > 40 and hello[0] == 0x16  # a handshake record
    with Gateway(GatewaySettings(backend_port=_dead_port(), handshake_timeout=1.5, ssl_context=tls_server_context),
                 ToyHandler()) as gw:
        result = []

        def trickle():
            started = time.monotonic()
            closed = closed_while_trickling(gw.port, hello[:40], 0.1)  # 4 s of bytes
            result.append((closed, time.monotonic() - started))

        trickler = threading.Thread(target=trickle)
        trickler.start()
        time.sleep(0.3)
        # Others are served while the trickler holds its slot (each handshake runs in its connection's thread).
        assert logs_in(gw.port, tls_files)
        trickler.join(30)
        [(closed, elapsed)] = result
        assert closed and elapsed < 3.5  # the deadline (1.5 s), not the 4 s the 40 bytes take
        assert _eventually_zero(gw)
        assert logs_in(gw.port, tls_files)  # and after
    with Gateway(GatewaySettings(backend_port=_dead_port(), handshake_timeout=60.0, ssl_context=tls_server_context),
                 ToyHandler()) as gw:
        # The same client is not cut off by a generous deadline: the cut above is the deadline's.
        assert not closed_while_trickling(gw.port, hello[:20], 0.1)


def test_the_deadline_covers_tls_and_sasl_together(tls_files, tls_server_context):
    """A quick TLS handshake does not restart the clock: SASL trickled after it is cut at the same deadline."""
    with Gateway(GatewaySettings(backend_port=_dead_port(), handshake_timeout=1.5, ssl_context=tls_server_context),
                 ToyHandler()) as gw:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as raw, \
                client_context(tls_files).wrap_socket(raw, server_hostname="localhost") as tls:
            started = time.monotonic()
            closed = False
            for byte in struct.pack(">BI", START, 5) + b"PLAIN" + struct.pack(">BI", OK, 200) + b"\0rita\0" * 10:
                try:
                    tls.settimeout(None)
                    tls.sendall(bytes([byte]))
                    time.sleep(0.1)
                    tls.settimeout(0.001)
                    if tls.recv(1024) == b"":
                        closed = True
                        break
                except (TimeoutError, ssl.SSLWantReadError):
                    pass
                except OSError:
                    closed = True
                    break
            assert closed and time.monotonic() - started < 5.0  # the deadline, not the 8.5 s of bytes
        assert _eventually_zero(gw)
