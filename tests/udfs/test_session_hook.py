"""The gateway's on_session_opened hook (how the server gives each JDBC
session its UDFs), against a fake HiveServer2, without a JVM."""

from __future__ import annotations

import logging

import pytest
from pyhive import hive

from tests.server.gateway.toy import ToyHandler, serving
from tests.server.gateway.transport.test_gateway_unit import FakeHiveServer
from tierlake.server.gateway.transport.server import Gateway
from tierlake.server.gateway.transport.settings import GatewaySettings


class RecordingBackend(FakeHiveServer):
    def __init__(self):
        super().__init__()
        self.handles: list[tuple[bytes, bytes]] = []

    def OpenSession(self, req):
        resp = super().OpenSession(req)
        ident = resp.sessionHandle.sessionId
        self.handles.append((ident.guid, ident.secret))
        return resp


@pytest.fixture
def backend():
    fake = RecordingBackend()
    with serving(fake) as port:
        yield fake, port


def test_hook_gets_the_backend_handle_before_the_client_can_use_the_session(backend):
    fake, port = backend
    seen: list[tuple[bytes, bytes]] = []
    with Gateway(GatewaySettings(backend_port=port),
                 ToyHandler(), on_session_opened=lambda guid, secret: seen.append((guid, secret))) as gw:
        conn = hive.connect("127.0.0.1", gw.port, username="alice")
        assert seen == fake.handles and len(seen) == 1
        conn.close()


def test_a_failing_hook_is_logged_and_the_session_works(backend, caplog):
    _, port = backend

    def boom(guid, secret):
        raise RuntimeError("no UDFs today")

    with (Gateway(GatewaySettings(backend_port=port), ToyHandler(), on_session_opened=boom) as gw,
          caplog.at_level(logging.WARNING, logger="tierlake.gateway")):
        conn = hive.connect("127.0.0.1", gw.port, username="alice")
        cursor = conn.cursor()
        cursor.execute("SELECT 1")
        assert cursor.fetchall() == [(1,)]
        conn.close()
    assert "on_session_opened hook failed: RuntimeError: no UDFs today" in caplog.text
