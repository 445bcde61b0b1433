"""The status page in headless Chromium (Debian's chromium + chromedriver, selenium), served by the real
server while it tiers: the page lists the tables, the lag charts have drawn data points, a Failed table
shows its error; with a password file a reader logs in and an unknown user does not.

``TIERLAKE_UPDATE_SCREENSHOTS=1`` also copies the screenshot to docs/images/status-page.png."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from tests.browser import chromium, screenshot
from tests.conftest import running_workers, wait_for
from tests.server.tiering.conftest import make_due, run, wait_status, wait_tiered
from tierlake.server.gateway.auth.authz import Authorizer
from tierlake.server.gateway.auth.passwords import PasswordFile, set_user
from tierlake.server.observability import metrics, sources
from tierlake.server.observability.http import ObservabilityHttp

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SCREENSHOT = ROOT / "docs" / "images" / "status-page.png"


@pytest.fixture
def browser():
    driver = chromium()
    yield driver
    driver.quit()


def log_in_as(driver, user: str, password: str) -> None:
    """Send HTTP Basic credentials with every request of this browser (what its login dialog would)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}})


def hold_failed(server, path: str) -> None:
    """Once the table's round failed, keep it Failed (its retry far away, as after many failures in a row):
    a retry 2 s later would otherwise move it to Pending before the browser looks."""
    from datetime import datetime, timezone

    def hold(states, now):
        state = next(s for s in states.values() if s.path == path)
        if state.status.value != "Failed":
            return False, False, []
        state.next_due = datetime(2100, 1, 1, tzinfo=timezone.utc)
        return True, True, []

    def held():
        wait_status(server, path, "Failed", timeout=120)
        return server.coordinator.mutate(hold)

    wait_for(held, 180, f"{path} to fail", every=0.1)


@pytest.fixture(scope="module")
def tiered(server):
    """A table tiered in three rounds, a second tiered once, a third whose rounds fail."""
    from pyhive import hive

    db = "page_" + uuid.uuid4().hex[:6]
    cur = hive.connect("127.0.0.1", server.gateway.port, username="tester").cursor()
    run(cur, f"CREATE DATABASE {db}")
    for name in ("orders", "clicks"):
        run(cur, f"CREATE TABLE {db}.{name} (id BIGINT, v STRING) TBLPROPERTIES ("
                 "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s')")
    run(cur, f"CREATE TABLE {db}.payments (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
             "'primary-key'='id', 'bucket.num'='1', 'table.datalake.freshness'='1 s')")
    workers = running_workers(server, 1)
    next(workers)
    try:
        run(cur, f"INSERT INTO {db}.clicks VALUES (1, 'a')")
        for n in range(3):
            run(cur, f"INSERT INTO {db}.orders VALUES ({n}, 'v{n}'), ({n + 100}, 'w{n}')")
            wait_tiered(server, f"{db}.orders")
            if n < 2:
                make_due(server, f"{db}.orders")
        wait_tiered(server, f"{db}.clicks")
        run(cur, f"ALTER TABLE {db}.clicks SET TBLPROPERTIES ('table.datalake.freshness'='10 min')")
        wait_status(server, f"{db}.clicks", "Scheduled")
        server.spark.sql(f"INSERT INTO {db}.payments (id, v, _change_type) VALUES (1, 'x', '+X')")
        hold_failed(server, f"{db}.payments")
        run(cur, f"INSERT INTO {db}.clicks VALUES (2, 'b')")  # pending until its next round, minutes away
        server.backlog_probe.probe()
    finally:
        next(workers, None)
    yield db
    cur.close()


def test_the_page_lists_tables_charts_lag_and_shows_the_failure(server, tiered, browser, tmp_path):
    from selenium.webdriver.common.by import By

    db = tiered
    browser.get(server.http.url)  # development mode: no login
    rows = {r.get_attribute("data-table"): r for r in browser.find_elements(By.CSS_SELECTOR, "tr.table-row")}
    assert {f"{db}.orders", f"{db}.clicks", f"{db}.payments"} <= set(rows)
    orders, payments, clicks = rows[f"{db}.orders"], rows[f"{db}.payments"], rows[f"{db}.clicks"]
    # Three tiered rounds and the current lag: four drawn points, each with its value.
    points = orders.find_elements(By.CSS_SELECTOR, "svg.lag-chart circle.point")
    assert len(points) >= 4 and all(p.is_displayed() and p.size["width"] > 0 for p in points)
    assert payments.find_element(By.CSS_SELECTOR, ".status").text == "Failed"
    assert "+X" in payments.find_element(By.CSS_SELECTOR, "td.error").text
    assert orders.find_element(By.CSS_SELECTOR, ".status").text in ("Scheduled", "Tiered", "Pending", "Tiering")
    assert clicks.find_elements(By.CSS_SELECTOR, "td.num")[2].text == "1"  # its pending row
    screenshot(browser, tmp_path / "status-page.png", SCREENSHOT, 10_000)

    # One table's page: its chart, its rounds, its error.
    orders.find_element(By.CSS_SELECTOR, "a").click()
    wait_for(lambda: browser.find_elements(By.ID, "rounds"), 30, "the table page")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"{db}.orders"
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.lag-chart circle.point")) >= 4
    assert len(browser.find_elements(By.CSS_SELECTOR, "#rounds tr")) >= 4  # header and three rounds
    assert browser.find_elements(By.ID, "maintenance") and browser.find_elements(By.ID, "quality")
    browser.get(server.http.url + f"table?name={db}.payments")
    assert "+X" in browser.find_element(By.ID, "last-error").text


def test_a_reader_logs_in_and_an_unknown_user_does_not(server, tiered, browser, tmp_path):
    from selenium.webdriver.common.by import By

    path = tmp_path / "passwords"
    set_user(path, "alice", "alice-pw", frozenset({"reader"}))
    # What the server wires with tierlake.gateway.password-file set (server/app.py), on this server's data.
    http = ObservabilityHttp("127.0.0.1", 0, Authorizer(PasswordFile(path)),
                             sources.server_source(server.spark, server.coordinator.rounds_table)).start()
    refused = metrics.GATEWAY_AUTH_FAILURES.labels("http")
    try:
        # Refused, the browser gets a 401 with a Basic challenge (a headless one shows an empty page).
        before = refused._value.get()
        log_in_as(browser, "mallory", "guess")
        browser.get(http.url)
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.table-row, h1")
        assert refused._value.get() > before
        before = refused._value.get()
        log_in_as(browser, "alice", "wrong")
        browser.get(http.url)
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.table-row, h1")
        assert refused._value.get() > before
        log_in_as(browser, "alice", "alice-pw")
        browser.get(http.url)
        names = {r.get_attribute("data-table") for r in browser.find_elements(By.CSS_SELECTOR, "tr.table-row")}
        assert f"{tiered}.payments" in names
    finally:
        http.stop()


def test_the_docs_show_the_status_page():
    assert SCREENSHOT.exists() and SCREENSHOT.stat().st_size > 10_000
    assert "images/status-page.png" in (ROOT / "docs" / "observability.md").read_text()
