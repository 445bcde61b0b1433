"""The SQL functions in real JDBC sessions: PyHive and beeline through the gateway."""

from __future__ import annotations

import time

import pytest
from pyhive import hive


def test_duration_seconds_in_a_fresh_pyhive_session(hive_cursor):
    hive_cursor.execute("SELECT tierlake_duration_seconds('1 min'), tierlake_duration_seconds(NULL), "
                        "tierlake_duration_seconds('500ms')")
    assert hive_cursor.fetchall() == [(60.0, None, 0.5)]


def test_every_session_gets_the_functions(server):
    # Sessions are isolated SparkSessions (singleSession=false): each needs its own registration.
    connections = [hive.connect("127.0.0.1", server.gateway.port, username=f"u{i}") for i in range(3)]
    try:
        for conn in connections:
            cursor = conn.cursor()
            cursor.execute("SELECT tierlake_duration_seconds('2 h')")
            assert cursor.fetchall() == [(7200.0,)]
    finally:
        for conn in connections:
            conn.close()


def test_the_hook_adds_little_to_open_session(server, monkeypatch):
    hook = server.gateway.on_session_opened
    timings: list[float] = []

    def timed(guid, secret):
        started = time.monotonic()
        hook(guid, secret)
        timings.append(time.monotonic() - started)

    monkeypatch.setattr(server.gateway, "on_session_opened", timed)
    for _ in range(3):
        hive.connect("127.0.0.1", server.gateway.port, username="quick").close()
    # A handful of py4j calls, no pickling: milliseconds (generous bound for a busy CI box).
    assert len(timings) == 3 and max(timings[1:]) < 0.5, timings


def test_a_bad_duration_is_a_sql_error_naming_the_value(hive_cursor):
    with pytest.raises(hive.OperationalError) as failure:
        hive_cursor.execute("SELECT tierlake_duration_seconds('soon')")
    assert "cannot parse 'soon' as a duration" in failure.value.args[0].status.errorMessage


def test_freshness_lag_over_the_tiering_status(hive_cursor):
    hive_cursor.execute(
        "SELECT tierlake_freshness_lag(current_timestamp() - INTERVAL 90 SECONDS, '1 min'), "
        "tierlake_freshness_lag(current_timestamp(), '1 min'), "
        "tierlake_freshness_lag(CAST(NULL AS TIMESTAMP), '1 min')")
    late, fresh, never = hive_cursor.fetchall()[0]
    assert 25 < late < 60 and fresh == 0.0 and never is None
    # Sys views stay free of UDFs, but queries over them may use them.
    hive_cursor.execute("SELECT count(*), max(tierlake_freshness_lag(last_tiered_time, '1 min')) "
                        "FROM sys.lake_tiering_status")
    count, worst = hive_cursor.fetchall()[0]
    assert count >= 0 and (worst is None or worst >= 0)


def test_driver_session_has_them_too(spark):
    assert spark.sql("SELECT tierlake_duration_seconds('30 s')").collect()[0][0] == 30.0


def test_beeline(beeline):
    result = beeline.run("SELECT tierlake_duration_seconds('1 min') AS s;\n")
    assert result.returncode == 0, result.stderr
    assert "60.0" in result.stdout.splitlines()
    result = beeline.run("SELECT tierlake_duration_seconds('soon');\n")
    assert result.returncode != 0
    assert "cannot parse 'soon' as a duration" in result.stdout + result.stderr
