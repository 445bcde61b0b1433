"""SASL PLAIN server side, without a JVM: raw frames over socketpairs, and the
real thrift_sasl client PyHive uses over a loopback socket."""

from __future__ import annotations

import socket
import struct
import threading

import pytest
from thrift.transport.TTransport import TTransportException

from tierlake.server.gateway.transport import sasl
from tierlake.server.gateway.transport.sasl import (
    BAD,
    COMPLETE,
    ERROR,
    OK,
    START,
    SaslError,
    SaslServerTransport,
    recv_exact,
)


def frame(status: int, payload: bytes) -> bytes:
    return struct.pack(">BI", status, len(payload)) + payload


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    status, length = struct.unpack(">BI", recv_exact(sock, 5))
    return status, recv_exact(sock, length) if length else b""


class ServerSide:
    """Runs the handshake in a thread; exposes its outcome."""

    def __init__(self, sock, **kwargs):
        self.transport = SaslServerTransport(sock, **kwargs)
        self.user = None
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.user = self.transport.handshake()
        except Exception as exc:  # noqa: BLE001 - recorded for the assertions
            self.error = exc

    def join(self):
        self.thread.join(5)
        assert not self.thread.is_alive(), "handshake did not finish"
        return self


@pytest.fixture
def pair():
    server, client = socket.socketpair()
    client.settimeout(5)
    yield server, client
    server.close()
    client.close()


@pytest.mark.parametrize("status", [OK, COMPLETE], ids=["thrift_sasl-OK", "hive-jdbc-COMPLETE"])
def test_plain_handshake_accepts_both_initial_response_statuses(pair, status):
    server, client = pair
    side = ServerSide(server)
    client.sendall(frame(START, b"PLAIN") + frame(status, b"\0alice\0secret"))
    assert read_frame(client) == (COMPLETE, b"")
    side.join()
    assert side.error is None
    assert side.user == "alice" == side.transport.user


def test_authenticator_sees_user_and_password(pair):
    server, client = pair
    seen = []
    side = ServerSide(server, authenticator=lambda u, p: seen.append((u, p)) or True)
    client.sendall(frame(START, b"PLAIN") + frame(OK, b"bob\0bob\0pw\xc3\xa9"))
    assert read_frame(client) == (COMPLETE, b"")
    side.join()
    assert seen == [("bob", "pw\u00e9")]


def test_empty_initial_response_gets_an_empty_challenge(pair):
    server, client = pair
    side = ServerSide(server)
    client.sendall(frame(START, b"PLAIN") + frame(OK, b""))
    assert read_frame(client) == (OK, b"")
    client.sendall(frame(OK, b"\0carol\0x"))
    assert read_frame(client) == (COMPLETE, b"")
    assert side.join().user == "carol"


def test_unsupported_mechanism_is_refused_with_bad(pair):
    server, client = pair
    side = ServerSide(server)
    client.sendall(frame(START, b"GSSAPI"))
    status, message = read_frame(client)
    assert status == BAD
    assert b"Unsupported mechanism type GSSAPI" in message
    assert isinstance(side.join().error, SaslError)


@pytest.mark.parametrize("authenticator", [lambda u, p: p == "right", lambda u, p: 1 / 0],
                         ids=["returns-false", "raises"])
def test_failed_authentication_sends_bad_with_message(pair, authenticator):
    server, client = pair
    side = ServerSide(server, authenticator=authenticator)
    client.sendall(frame(START, b"PLAIN") + frame(COMPLETE, b"\0alice\0wrong"))
    status, message = read_frame(client)
    assert status == BAD
    assert message == b"Error validating the login"
    assert "Error validating the login" in str(side.join().error)
    assert side.user is None


@pytest.mark.parametrize("payload, expected", [
    (b"alice\0secret", b"Invalid PLAIN message"),
    (b"\0\0secret", b"No user name"),
    (b"mallory\0alice\0pw", b"does not match"),
    (b"\0\xff\xfe\0pw", b"not UTF-8"),
])
def test_malformed_or_impersonating_plain_message(pair, payload, expected):
    server, client = pair
    side = ServerSide(server)
    client.sendall(frame(START, b"PLAIN") + frame(OK, payload))
    status, message = read_frame(client)
    assert status == BAD and expected in message
    assert isinstance(side.join().error, SaslError)


def test_raw_thrift_client_gets_error_hint(pair):
    server, client = pair
    side = ServerSide(server)
    client.sendall(b"\x80\x01\x00\x01\x00\x00\x00\x0bOpenSession")
    # A raw Thrift client cannot read a SASL frame: the transport hands the
    # bytes it read to the gateway, which answers with a Thrift error.
    error = side.join().error
    assert isinstance(error, sasl.NotSaslClient) and "noSasl" in str(error)
    assert error.prefix == b"\x80\x01\x00\x01\x00"


def test_status_0x80_after_start_is_an_error_frame(pair):
    server, client = pair
    side = ServerSide(server)
    client.sendall(frame(START, b"PLAIN") + b"\x80\x00\x00\x00\x00")
    status, message = read_frame(client)
    assert status == ERROR and b"Invalid SASL status 128" in message
    assert not isinstance(side.join().error, sasl.NotSaslClient)


def test_negotiation_must_start_with_start(pair):
    server, client = pair
    side = ServerSide(server)
    client.sendall(frame(OK, b"\0alice\0pw"))
    assert read_frame(client)[0] == ERROR
    assert isinstance(side.join().error, SaslError)


def test_oversized_negotiation_frame_is_refused_without_reading_it(pair):
    server, client = pair
    side = ServerSide(server)
    client.sendall(struct.pack(">BI", START, 1 << 30))
    assert read_frame(client)[0] == ERROR
    assert "too large" in str(side.join().error)


def test_truncated_negotiation_is_a_transport_error(pair):
    server, client = pair
    side = ServerSide(server)
    client.sendall(frame(START, b"PLAIN")[:7])
    client.shutdown(socket.SHUT_WR)
    assert isinstance(side.join().error, TTransportException)


def test_handshake_times_out(pair):
    server, _client = pair
    side = ServerSide(server, handshake_timeout=0.2)
    assert "timed out" in str(side.join().error)


def handshaken(pair, **kwargs) -> SaslServerTransport:
    server, client = pair
    side = ServerSide(server, **kwargs)
    client.sendall(frame(START, b"PLAIN") + frame(OK, b"\0alice\0pw"))
    assert read_frame(client) == (COMPLETE, b"")
    side.join()
    return side.transport


def test_framed_read_write_round_trip(pair):
    _, client = pair
    transport = handshaken(pair)
    # One logical message split over two frames, an empty frame in between,
    # and the next message sharing the second frame.
    client.sendall(struct.pack(">I", 3) + b"abc" + struct.pack(">I", 0)
                   + struct.pack(">I", 6) + b"defXYZ")
    assert transport.readAll(6) == b"abcdef"
    assert transport.read(100) == b"XYZ"
    transport.write(b"hello ")
    transport.write(b"world")
    transport.flush()
    (length,) = struct.unpack(">I", recv_exact(client, 4))
    assert recv_exact(client, length) == b"hello world"


def test_oversized_data_frame_is_refused(pair):
    _, client = pair
    transport = handshaken(pair, max_frame_size=1024)
    client.sendall(struct.pack(">I", 4096))
    with pytest.raises(TTransportException) as info:
        transport.read(1)
    assert info.value.type == TTransportException.SIZE_LIMIT


def test_eof_between_frames(pair):
    _, client = pair
    transport = handshaken(pair)
    client.shutdown(socket.SHUT_WR)
    with pytest.raises(TTransportException) as info:
        transport.read(4)
    assert info.value.type == TTransportException.END_OF_FILE


def test_real_thrift_sasl_client_round_trip():
    """The exact client stack PyHive uses (thrift_sasl + pure-sasl PLAIN)."""
    thrift_sasl = pytest.importorskip("thrift_sasl")
    from pyhive.sasl_compat import PureSASLClient
    from thrift.transport.TSocket import TSocket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    result = {}

    def serve():
        conn, _ = listener.accept()
        transport = SaslServerTransport(conn, authenticator=lambda u, p: p == "pw")
        result["user"] = transport.handshake()
        result["data"] = transport.readAll(5)
        transport.write(b"pong!")
        transport.flush()
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = thrift_sasl.TSaslClientTransport(
        lambda: PureSASLClient("127.0.0.1", username="dave", password="pw"), "PLAIN",
        TSocket("127.0.0.1", port))
    client.open()
    client.write(b"ping!")
    client.flush()
    assert client.readAll(5) == b"pong!"
    client.close()
    thread.join(5)
    listener.close()
    assert result == {"user": "dave", "data": b"ping!"}


def test_accept_any_is_the_default():
    assert sasl.accept_any("anyone", "") is True
    assert SaslServerTransport(None).authenticator is sasl.accept_any
