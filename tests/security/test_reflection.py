"""One life (issue 51, reproduction 6): reflection into System.exit, Runtime
and process creation is refused for every role — an admin's through the
password gateway, anyone's in development mode — decided on Spark's resolved
plan; reflection into pure classes still runs for an admin."""

from __future__ import annotations

import pytest
from pyhive import exc, hive

from tests.security.conftest import PASSWORD


def _cursor(port, user=None):
    if user is None:
        return hive.connect("127.0.0.1", port, username="dev").cursor()
    return hive.connect("127.0.0.1", port, username=user, password=PASSWORD[user], auth="CUSTOM").cursor()


def _refusal(cursor, statement) -> str:
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
        cursor.fetchall()
    return info.value.args[0].status.errorMessage


REFUSED = [
    ("SELECT reflect('java.lang.System', 'setProperty', 'tierlake.reflected', '1')", "java.lang.System.setProperty"),
    ("SELECT java_method('java.lang.Runtime', 'getRuntime')", "java.lang.Runtime.getRuntime"),
    ("SELECT java_method('java.lang.ProcessHandle', 'current')", "java.lang.ProcessHandle.current"),
    ("SELECT `REFLECT`('java.lang.System', 'getenv', 'HOME')", "java.lang.System.getenv"),
    ("SELECT reflect('java.lang.System', 'exit', 0)", "java.lang.System.exit"),
]


@pytest.mark.parametrize("mode", ["admin", "development"])
def test_reflection_that_could_end_the_jvm_is_refused_for_everyone(server, auth_gateway, mode):
    from pyspark import SparkContext

    cursor = _cursor(auth_gateway.port, "ann") if mode == "admin" else _cursor(server.gateway.port)
    for statement, target in REFUSED:
        message = _refusal(cursor, statement)
        assert f"a JVM method called by reflection ({target}; reflect may call java.lang.Boolean" in message, message
        assert "is not allowed (decided on Spark's resolved plan)" in message, message
    assert SparkContext._jvm.java.lang.System.getProperty("tierlake.reflected") is None
    cursor.execute("SELECT length(reflect('java.util.UUID', 'randomUUID')), java_method('java.lang.Math', 'abs', -2)")
    assert cursor.fetchall() == [(36, "2")]
