"""The SASL handshake has one total deadline: a client trickling one byte
at a time cannot hold a connection slot past it (a per-read timeout would
let it, forever). No JVM: the backend is never reached."""

from __future__ import annotations

import socket
import struct
import time

from tests.server.gateway.toy import ToyHandler
from tierlake.server.gateway.sasl import START
from tierlake.server.gateway.server import Gateway


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
    with Gateway("127.0.0.1", 0, "127.0.0.1", dead_port, ToyHandler(), handshake_timeout=1.0) as gw:
        assert closed_while_trickling(gw.port, trickle, 0.1)
        assert gw.connection_count == 0 or _eventually_zero(gw)
    with Gateway("127.0.0.1", 0, "127.0.0.1", dead_port, ToyHandler(), handshake_timeout=60.0) as gw:
        # The same client is not cut off by a generous deadline: the cut above is the deadline's.
        assert not closed_while_trickling(gw.port, trickle[:20], 0.1)


def _eventually_zero(gw) -> bool:
    for _ in range(100):
        if gw.connection_count == 0:
            return True
        time.sleep(0.05)
    return False
