"""The observability HTTP server and the status page over real HTTP, with the gateway's real password
file and authoriser, without a JVM (the pages are fed from an in-memory book and round history)."""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from tests.server.observability.test_metrics_unit import FakeState, _Status
from tierlake.server.gateway.auth.authz import Authorizer
from tierlake.server.gateway.auth.passwords import PasswordFile, set_user
from tierlake.server.observability import metrics
from tierlake.server.observability.http import ObservabilityHttp
from tierlake.server.observability.metrics import TableBook
from tierlake.server.observability.status_page import StatusSource, lag_points, svg_chart


def get(url: str, user: str | None = None, password: str = "") -> tuple[int, dict, str]:
    request = urllib.request.Request(url)
    if user is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def rounds_of(database: str, table: str, ends: list[datetime], rows: int = 5) -> list[dict]:
    return [{"database_name": database, "table_name": table, "started_at": end - timedelta(seconds=2),
             "ended_at": end, "rows": rows, "bytes": 100, "files": 1, "duration_ms": 2000, "outcome": "finished",
             "start_position": n, "end_position": n + 1, "job_id": "job-1", "error": None}
            for n, end in enumerate(ends)]


@pytest.fixture
def book():
    book = TableBook()
    book.publish_states([
        FakeState(1, "shop", "orders", _Status("Scheduled"), tiered_position=9),
        FakeState(2, "shop", "bad", _Status("Failed"), last_error="Unknown change type +X <script>"),
    ])
    return book


@pytest.fixture
def secured(tmp_path, book):
    path = tmp_path / "passwords"
    set_user(path, "alice", "reader-pw", frozenset({"reader"}))
    set_user(path, "svc", "svc-pw", frozenset({"tiering-service"}))
    now = datetime.now(timezone.utc)
    ends = [now - timedelta(seconds=s) for s in (60, 40, 20)]
    source = StatusSource(tables=book.entries, rounds=lambda: rounds_of("shop", "orders", ends))
    http = ObservabilityHttp("127.0.0.1", 0, Authorizer(PasswordFile(path)), source).start()
    yield http
    http.stop()


def test_lag_points_come_from_the_round_history():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rounds = rounds_of("d", "t", [t0, t0 + timedelta(seconds=30), t0 + timedelta(seconds=90)])
    rounds.append(dict(rounds[0], outcome="failed", ended_at=t0 + timedelta(seconds=50)))  # no lake change
    rounds.append(dict(rounds[0], rows=0, started_at=t0 + timedelta(seconds=118), ended_at=t0 + timedelta(seconds=120)))
    points = lag_points(rounds, (t0 + timedelta(seconds=130), 7.0))
    # Round k: ended_at(k) - started_at(k-1); the first: its own duration; an empty round: 0; then the current lag.
    assert [v for _, v in points] == [2.0, 32.0, 62.0, 0.0, 7.0]
    svg = svg_chart(points, freshness_s=30)
    assert svg.count('class="point"') == 5
    assert svg.count('fill="#c03030"') == 2  # the two points over the freshness line
    assert "no rounds yet" in svg_chart([], 30)


def test_no_credentials_and_unknown_users_are_refused(secured):
    status, headers, _ = get(secured.url)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    before = metrics.GATEWAY_AUTH_FAILURES.labels("http")._value.get()
    assert get(secured.url, "mallory", "guess")[0] == 401
    assert get(secured.url, "alice", "wrong")[0] == 401
    assert get(secured.url + "metrics", "mallory", "guess")[0] == 401
    assert get(secured.url, "svc", "svc-pw")[0] == 401  # a tiering-service login is no viewer
    assert metrics.GATEWAY_AUTH_FAILURES.labels("http")._value.get() == before + 4


def test_a_reader_sees_the_tables_and_the_metrics(secured):
    status, headers, page = get(secured.url, "alice", "reader-pw")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert 'data-table="shop.orders"' in page and 'data-table="shop.bad"' in page
    assert "Unknown change type +X &lt;script&gt;" in page  # the error, escaped
    assert '<meta http-equiv="refresh"' in page
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing from elsewhere
    row = page[page.index('data-table="shop.orders"'):]
    assert row[:row.index("</tr>")].count('class="point"') == 4  # three rounds and now
    status, headers, text = get(secured.url + "metrics", "alice", "reader-pw")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=")
    assert "# HELP tierlake_round_rows_total" in text
    status, _, detail = get(secured.url + "table?name=shop.orders", "alice", "reader-pw")
    assert status == 200 and 'id="rounds"' in detail and detail.count('class="point"') == 4
    assert get(secured.url + "table?name=shop.nope", "alice", "reader-pw")[0] == 404


def test_development_mode_needs_no_login(book):
    http = ObservabilityHttp("127.0.0.1", 0, Authorizer(None), StatusSource(tables=book.entries)).start()
    try:
        status, _, page = get(http.url)
        assert status == 200 and "shop.orders" in page
    finally:
        http.stop()


def test_the_server_turns_the_port_on_by_mode(tmp_path):
    """``Server._start_http`` as ``tierlake server`` runs it: off in production mode unless asked for,
    on a free loopback port in development mode, on the gateway's host when set."""
    from types import SimpleNamespace

    from tierlake.server.app import Server
    from tierlake.server.config.config import Config

    passwords = tmp_path / "passwords"
    set_user(passwords, "alice", "alice-pw", frozenset({"reader"}))

    def started(conf: dict, production: bool):
        server = Server(Config.load(home=tmp_path, conf=conf))
        server.gateway = SimpleNamespace(authorizer=Authorizer(PasswordFile(passwords) if production else None),
                                         settings=SimpleNamespace(ssl_context=None), session_count=0)
        server.coordinator = SimpleNamespace(rounds_table=SimpleNamespace(load=lambda: (None, [])))
        return server._start_http()

    assert started({}, production=True) is None
    for conf, production, host in (({}, False, "127.0.0.1"),
                                   ({"tierlake.http.port": "0", "tierlake.gateway.host": "localhost"}, True,
                                    "localhost")):
        http = started(conf, production)
        try:
            assert http.host == host and http.port > 0
            status, _, _ = get(http.url + "metrics")
            assert status == (401 if production else 200)
            assert get(http.url + "metrics", "alice", "alice-pw")[0] == 200
        finally:
            http.stop()


def test_with_the_gateways_tls_the_port_speaks_https_only(tmp_path, book):
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # as gateway_from_config builds it
    context.load_cert_chain(str(cert), str(key))
    http = ObservabilityHttp("127.0.0.1", 0, Authorizer(None), StatusSource(tables=book.entries), context).start()
    try:
        assert http.url.startswith("https://")
        client = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(http.url, context=client, timeout=10) as response:
            assert response.status == 200 and "shop.orders" in response.read().decode()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(http.url.replace("https://", "http://"), timeout=10).read()
    finally:
        http.stop()


def test_a_tiering_service_serves_its_metrics_and_no_status_page():
    """What ``tierlake tiering-service`` starts with ``tierlake.http.port`` set (server/tiering/service.py)."""
    http = ObservabilityHttp("127.0.0.1", 0).start()
    try:
        status, _, text = get(http.url + "metrics")
        assert status == 200 and "# TYPE tierlake_round_duration_seconds histogram" in text
        status, _, text = get(http.url)
        assert status == 200 and "metrics at /metrics" in text
        assert get(http.url + "table?name=a.b")[0] == 404
    finally:
        http.stop()
