"""``tierlake.*`` session settings with a password file (issue 50 item 1, issue 54 item 2): the
gateway answers every SET of a tierlake key itself; a misspelt one is refused to every role with a
did-you-mean (not "permission denied"), the request id needs the writer role, and a statement the
gateway refuses uses the id up like any other."""

from __future__ import annotations

import pytest
from pyhive import hive

from tests.security.conftest import PASSWORD


def login(gw, user):
    return hive.connect("127.0.0.1", gw.port, username=user, password=PASSWORD[user], auth="CUSTOM")


def error_of(cursor, statement: str) -> str:
    with pytest.raises(Exception) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    return f"{status.sqlState} {status.errorMessage}"


def shown(cursor) -> str:
    cursor.execute("SET `tierlake.write.request-id`")
    return cursor.fetchall()[0][1]


def test_tierlake_session_settings_with_a_password_file(auth_gateway):
    with login(auth_gateway, "rita") as reader:
        cursor = reader.cursor()
        text = error_of(cursor, "SET `tierlake.write.requestid`=abc")
        assert text.startswith("42704 ") and "did you mean tierlake.write.request-id?" in text, text
        text = error_of(cursor, "SET `tierlake.write.request-id`=abc")
        assert text.startswith("42501 ") and "writer" in text, text
    with login(auth_gateway, "will") as writer:
        cursor = writer.cursor()
        text = error_of(cursor, "SET `tierlake.write.request-id`=bad\u202eid")
        assert text.startswith("22023 ") and "U+202E" in text, text
        cursor.execute("SET `tierlake.write.request-id`=w-1")
        assert shown(cursor) == "w-1"
        assert error_of(cursor, "CREATE TABLE default.not_for_writers (id INT)").startswith("42501 ")
        assert shown(cursor) == "<undefined>"  # the refused statement was the id's statement
