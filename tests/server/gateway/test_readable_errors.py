"""Errors a user can read, through the real gateway: Spark's analysis and parse
errors as one line with their SQLSTATE and tierlake's error code (no Java class
names, plan or stack), a CALL without ``sys.`` with a hint, a CALL that does
not tokenize shown from its start with the quoting rule, and a lease drop that
finds nothing saying so. Synchronous and asynchronous statements alike."""

from __future__ import annotations

import pytest
from pyhive import exc

pytestmark = pytest.mark.integration

DB = "readable_errors"


def error_of(cursor, statement: str, run_async: bool):
    """(message, sqlstate, error code) of a statement that fails."""
    try:
        cursor.execute(statement, async_=run_async)
        if run_async:
            state = cursor.poll()
            while state.operationState in (0, 1):  # INITIALIZED, RUNNING
                state = cursor.poll()
            if state.errorMessage:
                return state.errorMessage, state.sqlState, state.errorCode
        cursor.fetchall()
    except exc.OperationalError as e:
        status = e.args[0].status
        return status.errorMessage, status.sqlState, status.errorCode
    raise AssertionError(f"{statement!r} did not fail")


def readable(message: str) -> bool:
    return ("\n" not in message and "Exception" not in message and "org.apache" not in message
            and "\tat " not in message and "'Project" not in message and "== SQL ==" not in message)


@pytest.fixture(scope="module")
def table(server):
    from pyhive import hive

    conn = hive.connect("127.0.0.1", server.gateway.port, username="tester")
    c = conn.cursor()
    c.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    c.execute(f"CREATE TABLE IF NOT EXISTS {DB}.t (a INT) USING iceberg")
    yield f"{DB}.t"
    conn.close()


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_common_analysis_errors_are_one_line_with_their_sqlstate(hive_cursor, table, run_async):
    cases = [
        ("SELECT * FROM nowhere.nothing", "42P01", 2004,
         "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nowhere`.`nothing` cannot be found (line 1, pos 14)"),
        (f"SELECT nope FROM {table}", "42703", 2015,
         "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column or function parameter with name `nope` cannot be "
         "resolved. Did you mean one of the following? [`a`] (line 1, pos 7)"),
        (f"INSERT INTO {table} (a, _change_type) VALUES (1, '+I')", "42703", 2015,
         "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column or function parameter with name `_change_type` cannot be "
         "resolved"),
        ("SELEC 1", "42601", 2001, "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC' (line 1, pos 0)"),
        ("DROP TABLE nowhere.nothing", "42P01", 2004,
         "[TABLE_OR_VIEW_NOT_FOUND] The table or view `spark_catalog`.`nowhere`.`nothing` cannot be found"),
    ]
    for statement, sqlstate, code, text in cases:
        message, state, error_code = error_of(hive_cursor, statement, run_async)
        assert message.startswith(text), (statement, message)
        assert (state, error_code) == (sqlstate, code), (statement, state, error_code)
        assert readable(message), (statement, message)


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_a_call_without_sys_gets_a_hint(hive_cursor, table, run_async):
    message, state, _ = error_of(hive_cursor, f"CALL validate('{table}')", run_async)
    assert state == "42601" and readable(message), message
    assert "CALL sys.validate(…)" in message, message


def test_a_call_that_does_not_tokenize_is_shown_from_its_start_with_the_quoting_rule(hive_cursor):
    statement = "CALL sys.create_table_as('job.x', 'SELECT 'x' AS a')"
    message, state, _ = error_of(hive_cursor, statement, False)
    assert state == "42601"
    assert statement in message, message
    assert "a quote inside a string literal ends it" in message and "\\'" in message, message


def test_dropping_a_lease_that_holds_nothing_says_so(hive_cursor):
    hive_cursor.execute("CALL sys.drop_lease('nosuch-lease')")
    (row,) = hive_cursor.fetchall()
    assert row[3] == "not found"
    assert "nothing was dropped" in row[5] and "nosuch-lease" in row[5]
