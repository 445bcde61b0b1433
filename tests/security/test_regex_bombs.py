"""Regular expressions cannot run away (issue 51, reproduction 2).

java.util.regex ignores interrupts, so a statement deadline could not stop
``'aaaa…ab' rlike '(.*a){12}$'``: the reader was told of the timeout and the
task kept its core. The patterns that backtrack catastrophically — a repeated
group holding a repeated part — are refused before they run, for every role
and wherever the statement would run (in tasks, folded in the driver, over
``sys`` tables that the gateway answers itself); a reader's pattern must be a
literal. Decided on Spark's resolved plan (AuthzCheck.java)."""

from __future__ import annotations

import pytest
from pyhive import exc, hive

from tests.security.conftest import PASSWORD

BOMB = "(.*a){12}$"


def _cursor(gateway, user):
    return hive.connect("127.0.0.1", gateway.port, username=user, password=PASSWORD[user], auth="CUSTOM").cursor()


def _refusal(cursor, statement) -> str:
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
        cursor.fetchall()
    status = info.value.args[0].status
    return f"{status.sqlState}: {status.errorMessage}"


@pytest.mark.parametrize("statement", [
    f"SELECT '{'a' * 31}' rlike '{BOMB}'",  # folded in the driver
    f"SELECT count(*) FROM range(100) WHERE repeat('a', 31 + CAST(id AS INT) % 2) rlike '{BOMB}'",  # in tasks
    f"SELECT count(*) FROM sys.tiering_rounds WHERE concat(outcome, '{'a' * 31}') rlike '{BOMB}'",  # sys only
    f"SELECT regexp_replace('{'a' * 31}', '(a+)+b', 'x')",
    "SELECT split('a,b', '(\\\\w+,?)*')",
])
@pytest.mark.parametrize("user", ["rita", "ann"])
def test_catastrophic_patterns_are_refused_for_every_role(auth_gateway, user, statement):
    message = _refusal(_cursor(auth_gateway, user), statement)
    assert message.startswith("42501: permission denied: a regular expression with a repeated group that repeats "
                              "inside"), message
    assert "write the inner repetition possessive, a*+, or the group atomic" in message, message


def test_ordinary_patterns_run_and_a_readers_pattern_is_a_literal(auth_gateway):
    reader, admin = _cursor(auth_gateway, "rita"), _cursor(auth_gateway, "ann")
    reader.execute("SELECT 'k=v' rlike '^(\\\\w+)=(\\\\w+)$', regexp_extract('k=v', '(\\\\w+)=(\\\\w+)', 2), "
                   "regexp_replace('aab', '(?>a+)+b', 'x'), '1,2,' rlike '^(\\\\d++,)*$'")
    assert reader.fetchall() == [(True, "v", "x", True)]
    statement = "SELECT count(*) FROM VALUES ('ab', 'a.'), ('cd', 'x') AS t(s, p) WHERE s rlike p"
    message = _refusal(reader, statement)
    assert "a regular expression that is not a literal (rlike) needs the admin role" in message, message
    admin.execute(statement)
    assert admin.fetchall() == [(1,)]
