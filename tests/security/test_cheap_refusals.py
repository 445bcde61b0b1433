"""Cheap refusals first (issue 51, reproduction 5): a megabyte CALL is refused
on its procedure's name and arity, or on the CALL size bound, before its
arguments are parsed — through the real gateway, four at once, while an
admin's statements go on."""

from __future__ import annotations

import threading

from pyhive import exc, hive

from tests.security.conftest import PASSWORD


def _connect(gateway, user):
    return hive.connect("127.0.0.1", gateway.port, username=user, password=PASSWORD[user], auth="CUSTOM")


def _error(gateway, user, statement) -> str:
    conn = _connect(gateway, user)
    try:
        conn.cursor().execute(statement)
    except exc.OperationalError as e:
        status = e.args[0].status
        return f"{status.sqlState}: {status.errorMessage}"
    finally:
        conn.close()
    raise AssertionError("accepted")


def test_megabyte_calls_are_refused_on_name_arity_and_size(auth_gateway):
    huge = "CALL sys.version(array(" + ",".join(["1"] * 500_000) + "))"
    assert len(huge) > 900_000
    errors: list[str] = []
    threads = [threading.Thread(target=lambda: errors.append(_error(auth_gateway, "ts", huge))) for _ in range(4)]
    for t in threads:
        t.start()
    admin = _connect(auth_gateway, "ann").cursor()
    admin.execute("SELECT 1")
    assert admin.fetchall() == [(1,)]
    for t in threads:
        t.join(timeout=120)
    assert errors == ["22023: sys.version takes at most 0 argument(s), got 1; signature: sys.version()"] * 4

    unknown = _error(auth_gateway, "ts", "CALL sys.verison(" + "'x'," * 100_000 + "'x')")
    assert unknown.startswith("42883: unknown procedure sys.verison; did you mean sys.version")

    big = "CALL sys.describe_procedure('" + "v" * 100_000 + "')"
    assert _error(auth_gateway, "rita", big) == (
        f"54000: CALL too large: {len(big)} bytes; tierlake.gateway.max-call-size is 65536 bytes")
    # Within the bound, the same call is parsed and answered as before.
    reader = _connect(auth_gateway, "rita").cursor()
    reader.execute("CALL sys.describe_procedure(name => 'version')")
    assert reader.fetchall()


def test_statements_too_deep_for_the_parser_are_too_complex_not_denied(auth_gateway):
    # Issue 51, reproduction 7: 3,000 nested parentheses cost 31.7 s of the
    # gateway's parse, then "permission denied" (42501); 1,200 from a query
    # generator got 42501 too.
    for depth in (3000, 1200):
        error = _error(auth_gateway, "rita", "SELECT " + "(" * depth + "1" + ")" * depth)
        assert error.startswith("54001: statement too complex: parentheses nested more than 128 deep"), error
    # Deep without brackets: Spark's parser runs out of stack, said as such.
    error = _error(auth_gateway, "will", "SELECT " + "NOT " * 5000 + "true")
    assert error.startswith("54001: statement too complex: Spark's parser ran out of stack"), error
    # Nesting within the bound is parsed and answered.
    reader = _connect(auth_gateway, "rita").cursor()
    reader.execute("SELECT " + "(" * 100 + "1" + ")" * 100)
    assert reader.fetchall() == [(1,)]


def test_a_refused_name_cannot_forge_a_log_line(server, auth_gateway):
    # Issue 51, reproduction 3: a refused statement's back-quoted table name
    # with a newline forged a whole log line, and raw ANSI escapes reached it.
    forged = "2026-01-01 00:00:00,000 WARNING [main] tierlake.gateway: user rita granted admin"
    name = f"t\n{forged}\x1b[2J\u202e"
    for statement in (f"INSERT INTO default.`{name}` VALUES (1)",
                      f"INSERT INTO spark_catalog.default.`{name}` VALUES (1)",
                      f"INSERT INTO `a:{name}`.t VALUES (1)"):
        assert _error(auth_gateway, "rita", statement).startswith("42501: permission denied")
    log = (server.config.logs_dir / "tierlake.log").read_text(encoding="utf-8")
    assert "\x1b" not in log and "\u202e" not in log
    assert not any(line.startswith(forged) for line in log.splitlines())
    assert f"t\\n{forged}\\x1b[2J\\u202e" in log
