"""Data quality through the real gateway: sys.validate, user expectations,
and the warn/block modes of tiering rounds (a real worker, real GX on Spark)."""

from __future__ import annotations

import json
import time

import pytest
from pyhive import exc

from tests.server.tiering.conftest import coordinator_state, run, stream_position, wait_status, wait_tiered
from tierlake.server.runtime.session import iceberg_table

pytestmark = pytest.mark.integration


def error_of(cursor, statement) -> str:
    with pytest.raises(exc.OperationalError) as info:
        run(cursor, statement)
    return info.value.args[0].status.errorMessage


def by_expectation(rows) -> dict:
    """validate's rows keyed by expectation type: (success, observed_value, unexpected_count, sample)."""
    return {r[1].split("(")[0]: (r[2], r[3], r[4], json.loads(r[5]) if r[5] else None) for r in rows}


def create(cursor, table, columns, **props):
    props = {"table.datalake.enabled": "true", "table.datalake.freshness": "1 h", **props}
    text = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    run(cursor, f"CREATE TABLE {table} ({columns}) TBLPROPERTIES ({text})")


def nudge(server, table, until, timeout: float = 120.0):
    """Make a Scheduled table due now (freshness is 1 h here) until ``until(state)``
    holds, then return that state. Only a table that needs a round is made due,
    so no stray round is left pending for the next step of a test."""
    deadline = time.monotonic() + timeout

    def change(states, now):
        state = next(s for s in states.values() if s.path == table)
        if until(state):
            return state, False, []
        if state.status.value == "Scheduled" and (state.next_due is None or state.next_due > now):
            state.next_due = now
            return None, True, []
        return None, False, []

    while time.monotonic() < deadline:
        state = server.coordinator.mutate(change)
        if state is not None:
            return state
        time.sleep(0.3)
    raise AssertionError(f"{table}: condition not reached in {timeout}s: {coordinator_state(server, table)}")


def tier_now(server, table):
    end = stream_position(server.spark, table)

    def tiered(state):
        assert state.status.value != "Failed", state.last_error
        return (state.tiered_position or 0) >= end and state.status.value in ("Scheduled", "Tiered")

    return nudge(server, table, tiered)


def test_a_clean_table_validates_green_and_an_injected_duplicate_key_red(server, workers, hive_cursor, db, capfd):
    table = f"{db}.orders"
    create(hive_cursor, table, "order_id BIGINT, amount DOUBLE", **{"primary-key": "order_id"})
    run(hive_cursor, f"INSERT INTO {table} (order_id, amount, _change_type) VALUES (1, 5.0, '+I'), (2, 7.5, '+I'), "
                     "(3, 9.0, '+I')")
    tier_now(server, table)
    added = run(hive_cursor, f"CALL sys.add_expectation('{table}', 'ExpectColumnValuesToBeBetween', "
                             "map('column', 'amount', 'min_value', 0, 'max_value', 100))")
    assert added == [(db, "orders", "expect_column_values_to_be_between",
                      '{"column": "amount", "max_value": 100, "min_value": 0}', True)]

    green = run(hive_cursor, f"CALL sys.validate('{table}')")
    checks = by_expectation(green)
    assert set(checks) == {"expect_column_values_to_not_be_null", "expect_column_values_to_be_unique",
                           "tierlake_lake_position_at_most", "tierlake_lake_equals_stream",
                           "expect_column_values_to_be_between"}
    assert all(success for success, *_ in checks.values()), green

    # Written behind tierlake's back: key 2 twice in the lake.
    run(hive_cursor, f"INSERT INTO {db}_lake.orders VALUES (2, 8.0)")
    red = run(hive_cursor, f"CALL sys.validate('{table}')")
    success, _, count, sample = by_expectation(red)["expect_column_values_to_be_unique"]
    assert not success and count == 2
    assert {"order_id": 2} in [{"order_id": s["order_id"]} for s in sample]
    assert by_expectation(red)["expect_column_values_to_be_between"][0]  # the user expectation still holds

    view = run(hive_cursor, "SELECT run_id, expectation, success, unexpected_sample FROM sys.lake_data_quality "
                            "WHERE database_name = %(db)s AND table_name = 'orders'", {"db": db})
    runs = {}
    for run_id, expectation, ok, sample in view:
        runs.setdefault(run_id, {})[expectation.split("(")[0]] = (ok, sample)
    assert set(runs) == {green[0][0], red[0][0]}
    assert all(ok for ok, _ in runs[green[0][0]].values())
    ok, sample = runs[red[0][0]]["expect_column_values_to_be_unique"]
    assert not ok and '"order_id": 2' in sample
    # GX ran in this process (the gateway's thread) without drawing progress bars on the console.
    assert "Calculating Metrics" not in capfd.readouterr().err


def test_a_log_table_row_count_must_match_what_was_tiered(server, workers, hive_cursor, db):
    table = f"{db}.events"
    create(hive_cursor, table, "id BIGINT, msg STRING")
    run(hive_cursor, f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    run(hive_cursor, f"INSERT INTO {table} VALUES (3, 'c')")
    tier_now(server, table)
    run(hive_cursor, f"INSERT INTO {db}_lake.events VALUES (3, 'c')")
    checks = by_expectation(run(hive_cursor, f"CALL sys.validate('{table}')"))
    assert set(checks) == {"expect_table_row_count_to_equal", "tierlake_lake_position_at_most",
                           "tierlake_lake_equals_stream"}
    success, observed, *_ = checks["expect_table_row_count_to_equal"]
    assert not success and observed == "4"
    # The rows say which one: the duplicated (3, 'c') is extra in the lake (tests/security/test_lake_validate.py).
    success, observed, count, sample = checks["tierlake_lake_equals_stream"]
    assert (success, json.loads(observed)["status"], count) == (False, "differs", 1)
    assert sample == {"missing": [], "extra": [{"id": 3, "msg": "c"}]}
    assert checks["tierlake_lake_position_at_most"][0]


def test_expectation_and_property_errors_are_clear(server, hive_cursor, db):
    table = f"{db}.e"
    create(hive_cursor, table, "id BIGINT, v STRING")
    assert "unknown expectation 'expect_column_values_to_be_uniqe'; did you mean expect_column_values_to_be_unique" \
        in error_of(hive_cursor, f"CALL sys.add_expectation('{table}', 'expect_column_values_to_be_uniqe', "
                                 "'{\"column\": \"id\"}')")
    message = error_of(hive_cursor, f"CALL sys.add_expectation('{table}', 'expect_column_values_to_be_between', "
                                    "map('column', 'id', 'min_value', 'x', 'max_valu', 3))")
    assert "bad arguments for expect_column_values_to_be_between" in message
    assert "max_valu: extra fields not permitted" in message and "min_value" in message
    assert "has no column 'nope'" in error_of(
        hive_cursor,
        f"CALL sys.add_expectation('{table}', 'expect_column_values_to_not_be_null', map('column', 'nope'))",
    )
    assert "not valid JSON" in error_of(
        hive_cursor, f"CALL sys.add_expectation('{table}', 'expect_column_values_to_not_be_null', '{{column')"
    )
    assert "has no expectation expect_column_values_to_not_be_null" in error_of(
        hive_cursor, f"CALL sys.drop_expectation('{table}', 'expect_column_values_to_not_be_null')"
    )
    assert ("invalid value 'strict' for table property 'table.datalake.quality': expected one of 'off', 'warn', "
            "'block'") in error_of(
        hive_cursor, f"ALTER TABLE {table} SET TBLPROPERTIES ('table.datalake.quality'='strict')"
    )
    assert "invalid value 'yes' for table property 'table.datalake.quality'" in error_of(
        hive_cursor,
        f"CREATE TABLE {db}.bad (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
        "'table.datalake.quality'='yes')",
    )
    run(hive_cursor, f"ALTER TABLE {table} SET TBLPROPERTIES ('table.datalake.quality'='warn')")
    assert coordinator_state(server, table).properties["table.datalake.quality"] == "warn"


def hold_failed(server, table):
    """Tier the table until it fails, and keep it Failed (no automatic retry),
    so that only CALL sys.retry_tiering can move it on."""
    from datetime import timedelta

    nudge(server, table, lambda s: s.status.value == "Failed")

    def hold(states, now):
        state = next(s for s in states.values() if s.path == table)
        if state.status.value != "Failed":
            return None, False, []
        state.next_due = now + timedelta(hours=1)
        return state, True, []

    held = server.coordinator.mutate(hold)
    return held if held is not None else hold_failed(server, table)  # retried by the back-off meanwhile


def test_block_mode_publishes_only_data_that_passes(server, workers, hive_cursor, db, spark):
    table, lake = f"{db}.pay", f"{db}_lake.pay"
    create(hive_cursor, table, "id BIGINT, amount DOUBLE", **{"primary-key": "id", "table.datalake.quality": "block"})
    run(
        hive_cursor,
        f"CALL sys.add_expectation('{table}', 'expect_column_values_to_be_between', "
        '\'{"column": "amount", "min_value": 0, "max_value": 100}\')',
    )
    run(hive_cursor, f"INSERT INTO {table} (id, amount, _change_type) VALUES (1, 10.0, '+I'), (2, 20.0, '+I')")
    tier_now(server, table)
    published = iceberg_table(spark, lake).currentSnapshot().snapshotId()

    run(hive_cursor, f"INSERT INTO {table} (id, amount, _change_type) VALUES (3, 500.0, '+I')")
    state = hold_failed(server, table)
    assert "data quality check failed" in state.last_error and "nothing was published" in state.last_error
    assert "expect_column_values_to_be_between" in state.last_error and '"id": 3' in state.last_error
    # main is untouched: same snapshot, no trace of key 3, no leftover branch.
    assert iceberg_table(spark, lake).currentSnapshot().snapshotId() == published
    assert run(hive_cursor, f"SELECT id, amount FROM {lake} ORDER BY id") == [(1, 10.0), (2, 20.0)]
    assert not [r for r in iceberg_table(spark, lake).refs().keySet() if str(r).startswith("tierlake_")]
    runs = run(
        hive_cursor,
        "SELECT run_trigger, success FROM sys.quality_results WHERE database_name = %(db)s AND source = 'user'",
        {"db": db},
    )
    assert ("block", True) in runs and ("block", False) in runs
    assert coordinator_state(server, table).status.value == "Failed"

    # The fix for a stream: a correcting change for the key, then a retry.
    run(hive_cursor, f"INSERT INTO {table} (id, amount, _change_type) VALUES (3, 50.0, '+U')")
    assert run(hive_cursor, f"CALL sys.retry_tiering('{table}')")[0][2] == "Pending"
    wait_tiered(server, table)
    assert run(hive_cursor, f"SELECT id, amount FROM {lake} ORDER BY id") == [(1, 10.0), (2, 20.0), (3, 50.0)]
    assert coordinator_state(server, table).last_error is None


def test_warn_mode_records_every_round_without_blocking(server, workers, hive_cursor, db):
    table = f"{db}.w"
    create(hive_cursor, table, "id BIGINT, amount DOUBLE", **{"table.datalake.quality": "warn"})
    run(
        hive_cursor,
        f"CALL sys.add_expectation('{table}', 'expect_column_values_to_be_between', "
        "map('column', 'amount', 'max_value', 100))",
    )
    for batch in range(2):
        run(hive_cursor, f"INSERT INTO {table} VALUES ({batch}, {batch * 1000.0})")
        tier_now(server, table)
    assert sorted(run(hive_cursor, f"SELECT id FROM {db}_lake.w")) == [(0,), (1,)]  # the bad row is published
    rows = run(
        hive_cursor,
        "SELECT run_id, run_trigger, tiered_position, source, success FROM sys.quality_results "
        "WHERE database_name = %(db)s ORDER BY run_time",
        {"db": db},
    )
    runs = {}
    for run_id, trigger, position, source, success in rows:
        assert trigger == "warn"
        runs.setdefault((run_id, position), {})[source] = runs.get((run_id, position), {}).get(source, True) and success
    positions = sorted(p for _, p in runs)
    assert len(runs) == 2 and positions[-1] == stream_position(server.spark, table)
    by_position = {p: v for (_, p), v in runs.items()}
    assert by_position[positions[0]] == {"derived": True, "user": True}
    assert by_position[positions[1]] == {"derived": True, "user": False}
    assert coordinator_state(server, table).last_error is None
    wait_status(server, table, "Scheduled")
