"""Budgets per door (issue 51, reproduction 4): the HTTP port has its own
connection limit (in all and per address) and its own budget of password
checks, apart from the gateway's; a table page's Spark queries are one at a
time and shared by concurrent loads. Real HTTP, the real password file, no JVM."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.server.observability.test_http_unit import get
from tierlake.server.gateway.auth.authz import Authorizer
from tierlake.server.gateway.auth.passwords import PasswordFile, set_user
from tierlake.server.observability import http as http_module
from tierlake.server.observability.http import ObservabilityHttp
from tierlake.server.observability.sources import PageQueries


@pytest.fixture
def passwords(tmp_path):
    path = tmp_path / "passwords"
    set_user(path, "alice", "reader-pw", frozenset({"reader"}))
    return PasswordFile(path)


def test_http_logins_never_take_the_gateways_password_checks(passwords, monkeypatch):
    """While the HTTP door's one check is busy, the gateway's four are all free."""
    gateway_checks, inside, release = passwords._checks, threading.Event(), threading.Event()
    real = http_module._Budget.__enter__

    def slow_enter(self):
        out = real(self)
        inside.set()
        release.wait(10)
        return out

    monkeypatch.setattr(http_module._Budget, "__enter__", slow_enter)
    server = ObservabilityHttp("127.0.0.1", 0, Authorizer(passwords)).start()
    try:
        worker = threading.Thread(target=get, args=(server.url + "metrics", "alice", "wrong"))
        worker.start()
        assert inside.wait(10)
        for _ in range(4):  # the gateway's budget is untouched by the HTTP check in progress
            assert gateway_checks.acquire(blocking=False)
        for _ in range(4):
            gateway_checks.release()
        server._checks.wait_s = 0.1
        status, headers, body = get(server.url + "metrics", "alice", "also-wrong")  # the door's one check is taken
        assert (status, headers.get("Retry-After"), body) == (503, "1", "busy: too many logins at once; try again\n")
        release.set()
        worker.join(10)
    finally:
        release.set()
        server.stop()


def test_connections_over_the_doors_limit_are_answered_503_at_once(passwords, monkeypatch):
    monkeypatch.setattr(http_module, "HTTP_MAX_PER_ADDRESS", 3)
    server = ObservabilityHttp("127.0.0.1", 0, Authorizer(passwords)).start()
    held = []
    try:
        for _ in range(3):  # idle connections that never send a request hold the address's slots
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert extra.recv(200).startswith(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n")
        extra.close()
        for s in held:
            s.close()
        deadline = time.monotonic() + 40  # the handlers notice the closed sockets and free the slots
        while server._conns and time.monotonic() < deadline:
            time.sleep(0.2)
        assert get(server.url + "metrics", "alice", "reader-pw")[0] == 200
    finally:
        for s in held:
            s.close()
        server.stop()


def test_page_queries_run_one_at_a_time_and_are_shared():
    running, most, calls = [0], [0], []
    lock = threading.Lock()

    class Counted(PageQueries):
        def run(self, path, database, table):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.2)
            calls.append((path, database, table))
            with lock:
                running[0] -= 1
            return [{"table": table}]

    now = [0.0]
    queries = Counted(spark=None, max_age_s=10, clock=lambda: now[0])
    threads = [threading.Thread(target=queries, args=("q.sql", "db", f"t{n % 2}")) for n in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most[0] == 1 and sorted(calls) == [("q.sql", "db", "t0"), ("q.sql", "db", "t1")]
    assert queries("q.sql", "db", "t0") == [{"table": "t0"}] and len(calls) == 2
    now[0] = 11.0  # older than its age: read again
    assert queries("q.sql", "db", "t0") == [{"table": "t0"}] and len(calls) == 3
