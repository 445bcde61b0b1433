"""Connections that have not logged in cannot keep anyone from logging in:
they have a pool of their own (security.Admission), a share of it per client
address, and a full pool evicts its oldest handshake instead of turning the
newcomer away. The pool's rules without sockets, then the gateway with a
fake backend (no JVM), then 1,000 idle sockets against the real gateway
while an admin logs in with PyHive."""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time

import pytest
from pyhive import hive

from tests.security.conftest import PASSWORD, configured_gateway
from tests.server.gateway.toy import ToyHandler
from tests.server.gateway.transport.test_gateway_unit import SUCCESS, RawClient, fake_backend  # noqa: F401 - a fixture
from tierlake.server.config import settings
from tierlake.server.gateway.transport.sasl import BAD, COMPLETE, ERROR, OK, START
from tierlake.server.gateway.transport.security import Admission, address_key
from tierlake.server.gateway.transport.server import Gateway
from tierlake.server.gateway.transport.settings import GatewaySettings

IDLE_SOCKETS = 1000


# -- the pools, without sockets -------------------------------------------------

def test_an_address_over_its_share_evicts_its_own_oldest_handshake():
    pools = Admission(max_authenticated=10, max_pending=10, max_pending_per_address=3)
    assert [pools.admit(f"a{i}", "10.0.0.1") for i in range(3)] == [[], [], []]
    assert pools.admit("a3", "10.0.0.1") == ["a0"]
    assert pools.admit("a4", "10.0.0.1") == ["a1"]
    assert pools.admit("b0", "10.0.0.2") == []  # another address has its own share
    assert pools.pending_count == 4


def test_a_full_pool_evicts_from_the_heaviest_address_never_a_lone_login():
    pools = Admission(max_authenticated=10, max_pending=6, max_pending_per_address=4)
    pools.admit("admin", "10.0.0.9")
    for i in range(5):
        pools.admit(f"x{i}", f"10.0.1.{i % 2}")  # 3 from .0, 2 from .1
    assert pools.pending_count == 6
    # Whoever comes next, the victim is the oldest handshake of the address holding the most.
    assert pools.admit("y0", "10.0.2.1") == ["x0"]
    assert pools.admit("y1", "10.0.2.2") == ["x1"]  # .0 and .1 hold 2 each: the oldest of them
    # A flood from many addresses: the lone admin handshake is never the one evicted while
    # another address holds more than one.
    for i in range(50):
        assert "admin" not in pools.admit(f"z{i}", "10.0.3.1")
    assert pools.promote("admin") is None
    assert (pools.pending_count, pools.authenticated_count) == (5, 1)


def test_logged_in_connections_have_their_own_pool():
    pools = Admission(max_authenticated=2, max_pending=2, max_pending_per_address=2)
    for name in ("u1", "u2"):
        pools.admit(name, "127.0.0.1")
        assert pools.promote(name) is None
    pools.admit("u3", "127.0.0.1")
    assert "too many connections" in pools.promote("u3")
    assert (pools.pending_count, pools.authenticated_count) == (0, 2)
    pools.forget("u1")
    pools.admit("u4", "127.0.0.1")
    assert pools.promote("u4") is None


def test_an_evicted_handshake_cannot_log_in_afterwards():
    pools = Admission(max_authenticated=5, max_pending=1, max_pending_per_address=1)
    pools.admit("slow", "127.0.0.1")
    assert pools.admit("next", "127.0.0.1") == ["slow"]
    assert "closed before it logged in" in pools.promote("slow")
    assert pools.authenticated_count == 0


def test_ipv6_addresses_are_counted_per_64():
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff:1") == "2001:db8::/64"
    assert address_key("2001:db8:0:1::1") != address_key("2001:db8::1")
    assert address_key("::ffff:10.0.0.1") == "10.0.0.1"
    assert address_key("10.0.0.1") == "10.0.0.1"


def test_the_defaults_are_the_registered_settings():
    gw = Gateway(GatewaySettings(backend_port=1), ToyHandler())
    assert gw.settings.max_connections == settings.parse_default("tierlake.gateway.max-connections") == 256
    assert gw._admission.max_pending == settings.parse_default(
        "tierlake.gateway.max-unauthenticated-connections") == 256
    assert gw._admission.max_pending_per_address == settings.parse_default(
        "tierlake.gateway.max-unauthenticated-per-address") == 64


# -- the gateway, fake backend ----------------------------------------------------

def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise AssertionError(f"this test needs {needed} file descriptors; the hard limit here is {soft}")


def open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that send nothing, the attack of the issue."""
    idle = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        idle.append(sock)
    return idle


def closed_by_gateway(sock: socket.socket, wait: float = 0.0) -> bool:
    sock.settimeout(wait or 0.001)
    try:
        return sock.recv(1) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True


def sasl_login(port: int, user: str = "rita", password: str = "pw") -> tuple[int, bytes, socket.socket]:
    """SASL PLAIN up to the gateway's answer: (status, message, socket)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    token = f"\0{user}\0{password}".encode()
    sock.sendall(struct.pack(">BI", START, 5) + b"PLAIN" + struct.pack(">BI", OK, len(token)) + token)
    status, length = struct.unpack(">BI", sock.recv(5, socket.MSG_WAITALL))
    return status, sock.recv(length, socket.MSG_WAITALL) if length else b"", sock


def test_idle_connections_are_evicted_oldest_first_and_logins_still_work(fake_backend):  # noqa: F811
    _, port = fake_backend
    with Gateway(GatewaySettings(backend_port=port,
                                 max_connections=4, max_unauthenticated=8, max_unauthenticated_per_address=6),
                 ToyHandler()) as gw:
        idle = open_idle(gw.port, 100)
        try:
            # The 94 oldest were closed at once to make room; the newest 6 (the address's share) wait.
            assert all(closed_by_gateway(sock, 5.0) for sock in idle[:94])
            assert not any(closed_by_gateway(sock) for sock in idle[94:])
            assert gw.unauthenticated_count == 6
            client = RawClient(gw, user="rita")
            assert client.execute("SELECT 1").status.statusCode == SUCCESS
            assert gw.authenticated_count == 1
            client.close()
        finally:
            for sock in idle:
                sock.close()


def test_a_full_logged_in_pool_refuses_the_login_with_a_message(fake_backend):  # noqa: F811
    _, port = fake_backend
    with Gateway(GatewaySettings(backend_port=port,
                                 max_connections=2, max_unauthenticated=4, max_unauthenticated_per_address=4),
                 ToyHandler()) as gw:
        clients = [RawClient(gw, user=f"u{i}") for i in range(2)]
        idle = open_idle(gw.port, 3)  # handshakes do not count against logged-in slots
        status, message, sock = sasl_login(gw.port)
        sock.close()
        assert (status, message.decode()) == (ERROR, "too many connections: the gateway has 2 open "
                                                     "(tierlake.gateway.max-connections); try again later")
        clients[0].close()
        deadline = time.monotonic() + 5
        while gw.authenticated_count > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        third = RawClient(gw, user="u2")  # a freed slot is taken again
        assert third.execute("SELECT 1").status.statusCode == SUCCESS
        for c in (clients[1], third, *idle):
            c.close()


def test_a_wrong_password_holds_no_slot(fake_backend):  # noqa: F811
    _, port = fake_backend
    with Gateway(GatewaySettings(backend_port=port, max_connections=1),
                 ToyHandler(), authenticator=lambda user, password: password == "right") as gw:
        for _ in range(5):
            status, message, sock = sasl_login(gw.port, password="wrong")
            sock.close()
            assert (status, message) == (BAD, b"Error validating the login")
        status, _, sock = sasl_login(gw.port, password="right")
        assert status == COMPLETE
        sock.close()


def test_an_evicted_tls_handshake_is_closed_at_once(fake_backend, tls_files):  # noqa: F811
    import ssl

    cert, key, _ = tls_files
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    _, port = fake_backend
    with Gateway(GatewaySettings(backend_port=port,
                                 ssl_context=context, max_unauthenticated=2, max_unauthenticated_per_address=2),
                 ToyHandler()) as gw:
        first = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        first.sendall(b"\x16\x03\x01")  # the start of a ClientHello: the gateway waits for the rest
        time.sleep(0.3)  # its thread is inside the TLS handshake now
        others = open_idle(gw.port, 2)
        started = time.monotonic()
        assert closed_by_gateway(first, 5.0)
        assert time.monotonic() - started < 2.0  # evicted, not cut at the 30 s deadline
        for sock in (first, *others):
            sock.close()


# -- 1,000 idle sockets against the real gateway ------------------------------------

@pytest.mark.integration
def test_an_admin_logs_in_past_1000_idle_sockets(server, password_file):
    raise_fd_limit(IDLE_SOCKETS * 2 + 512)  # both ends of every socket live in this process
    gw = configured_gateway(server, **{"tierlake.gateway.password-file": str(password_file)})
    idle: list[socket.socket] = []
    try:
        idle = open_idle(gw.port, IDLE_SOCKETS)
        assert gw.unauthenticated_count <= settings.parse_default(
            "tierlake.gateway.max-unauthenticated-per-address")
        started = time.monotonic()
        conn = hive.connect("127.0.0.1", gw.port, username="ann", password=PASSWORD["ann"], auth="CUSTOM")
        cursor = conn.cursor()
        cursor.execute("SELECT 1")
        assert cursor.fetchall() == [(1,)]
        elapsed = time.monotonic() - started
        assert elapsed < 2.0, f"login + SELECT 1 took {elapsed:.2f} s behind {IDLE_SOCKETS} idle sockets"
        conn.close()
        # The idle sockets were closed by the gateway (all but the newest few), not left to the deadline.
        assert sum(closed_by_gateway(sock) for sock in idle) >= IDLE_SOCKETS - settings.parse_default(
            "tierlake.gateway.max-unauthenticated-per-address")
    finally:
        for sock in idle:
            sock.close()
        gw.stop()


@pytest.mark.integration
def test_a_burst_of_logins_from_one_host_all_get_in(server, password_file):
    """Many clients of one host (a pool, 16 writers) logging in at once are not each other's eviction."""
    gw = configured_gateway(server, **{"tierlake.gateway.password-file": str(password_file)})
    results: list = []

    def login_and_query():
        try:
            with hive.connect("127.0.0.1", gw.port, username="rita", password=PASSWORD["rita"],
                              auth="CUSTOM") as conn:
                cursor = conn.cursor()
                cursor.execute("SELECT 1")
                results.append(cursor.fetchall())
        except Exception as error:  # noqa: BLE001 - reported below
            results.append(repr(error))

    try:
        threads = [threading.Thread(target=login_and_query) for _ in range(48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert results == [[(1,)]] * 48
    finally:
        gw.stop()
