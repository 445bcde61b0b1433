"""The role each statement needs, decided on Spark's own parse (the
session's parser over py4j), and a property: hiding an admin-only
statement's meaning behind comments, hints, ``${}``, ``-- \\`` line
continuations, ``;`` or whitespace at any token boundary, in any case, never
makes it a reader's: neither for the rules nor through the gateway's own
``Authorizer.check`` of a reader with a password file."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlake.procedures import load_builtins
from tierlake.server.exceptions import PermissionDeniedError, SqlSyntaxError
from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.auth.authz import Authorizer, SparkSessions
from tierlake.server.gateway.auth.passwords import PasswordFile
from tierlake.server.sqlapi import roles as R

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def authorizer(spark):
    return Authorizer(None, load_builtins()).attach(SparkSessions(spark))


def need(authorizer, statement: str, database: str | None = None):
    jsession = authorizer.sessions.session(None, None)
    plan = planauth.parse_plan(jsession, statement)
    return planauth.requirement(plan, database, authorizer.sessions.functions(jsession, {"x"}))


@pytest.mark.parametrize("statement, role", [
    ("SELECT * FROM sys.lake_tiering_status", R.READER),
    ("select 1 union select 2", R.READER),
    ("(SELECT 1)", R.READER),
    ("VALUES (1)", R.READER),
    ("SHOW TABLES IN sys", R.READER),
    ("DESCRIBE sys.tiering_rounds", R.READER),
    ("EXPLAIN SELECT 1", R.READER),
    ("USE shop", R.READER),
    ("SET spark.sql.shuffle.partitions=2", R.READER),
    ("SET", R.READER),
    ("SET -v", R.ADMIN),
    ("SET TIME ZONE 'UTC'", R.READER),
    ("RESET", R.READER),
    ("SELECT * FROM shop.orders.snapshots", R.READER),
    ("SELECT x FROM range(3) LATERAL VIEW explode(array(1)) t AS x", R.READER),
    ("SELECT tierlake_freshness_lag(now(), now())", R.READER),
    ("SET spark.sql.catalog.evil=com.example.Evil", R.ADMIN),
    ("SET `spark.sql.extensions` = x", R.ADMIN),
    ("SET spark.hadoop.fs.defaultFS=file:///", R.ADMIN),
    ("SET spark.sql.variable.substitute=true", planauth.NOBODY),
    ("INSERT INTO shop.orders VALUES (1, 'a')", R.WRITER),
    ("insert into orders (id) values (1)", R.WRITER),
    ("WITH x AS (SELECT 1 AS id) INSERT INTO shop.t SELECT * FROM x", R.WRITER),
    ("MERGE INTO shop.t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", R.WRITER),
    ("UPDATE shop.t SET a = 1", R.WRITER),
    ("DELETE FROM shop.t WHERE id = 1", R.WRITER),
    ("INSERT INTO sys.tiering_tables SELECT * FROM sys.tiering_tables", R.ADMIN),
    ("DELETE FROM `sys`.`tiering_round_log`", R.ADMIN),
    ("INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT 1", R.ADMIN),
    ("CREATE TABLE shop.t (id BIGINT)", R.ADMIN),
    ("ALTER TABLE shop.t SET TBLPROPERTIES ('table.datalake.freshness'='1 s')", R.ADMIN),
    ("DROP TABLE shop.t", R.ADMIN),
    ("ADD JAR /tmp/evil.jar", R.ADMIN),
    ("CALL spark_catalog.system.expire_snapshots('shop.t')", R.ADMIN),
    ("SELECT reflect('java.lang.System', 'exit', 0)", R.ADMIN),
    ("SELECT * FROM text.`/etc/passwd`", R.ADMIN),
    ("SELECT no_such_function(1)", R.ADMIN),
])
def test_roles(authorizer, statement, role):
    assert need(authorizer, statement).role == role


def test_unqualified_names_resolve_against_the_current_database(authorizer):
    assert need(authorizer, "INSERT INTO tiering_tables VALUES (1)", "sys").role == R.ADMIN
    assert need(authorizer, "INSERT INTO tiering_tables VALUES (1)", "shop").role == R.WRITER


def test_what_does_not_parse_is_refused_with_sparks_error(authorizer):
    for statement in ("this is not sql ((", "SELECT 1; DROP TABLE shop.t", "/* /*+ */ SELECT 1 */"):
        with pytest.raises(SqlSyntaxError, match="PARSE_SYNTAX_ERROR|UNCLOSED_BRACKETED_COMMENT|Syntax error"):
            need(authorizer, statement)


def test_spark_cannot_parse_a_sys_call_so_the_gateway_recognises_it_by_its_start(authorizer):
    # Iceberg's parser takes CALLs of Iceberg's own procedures only; Spark 3.5 has no CALL.
    for statement in ("CALL sys.version()", "/* c */ call `sys`.list_tiering_statuses('a.b')"):
        with pytest.raises(SqlSyntaxError):
            need(authorizer, statement)
        assert authorizer.requirement(statement).role == R.READER  # the procedure's role
    assert authorizer.requirement("CALL sys.enable_tiering('a.b')").role == R.ADMIN
    # Not a sys CALL by its start: Spark's parse decides, and an Iceberg procedure needs admin.
    assert authorizer.requirement("CALL spark_catalog.system.expire_snapshots('sys.x')").role == R.ADMIN


ADMIN_ONLY = [
    "DROP TABLE sys.procedure_roles",
    "SELECT TRANSFORM(*) USING 'id' AS (o STRING) FROM (SELECT 1 a)",
    "ADD JAR /tmp/evil.jar",
    "SET spark.sql.catalog.evil = com.example.Evil",
    "SELECT * FROM `com.databricks.spark.csv`.`/etc/passwd`",
    "INSERT INTO sys.tiering_tables SELECT * FROM sys.tiering_tables",
    "SELECT java_method('java.lang.System', 'getenv', 'HOME')",
    "WITH q AS (SELECT * FROM text.`/etc/passwd`) SELECT * FROM q",
    "CREATE FUNCTION f AS 'com.example.F'",
    "INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT 1",
    "SET spark.sql.variable.substitute = true",
    "EXPLAIN SELECT * FROM json.`/etc/passwd`",
]
# Quoted strings and identifiers stay whole; everything else splits at word/punctuation boundaries.
_TOKENS = re.compile(r"'[^']*'|`[^`]*`|\w+|\S")
JUNK = [" ", "\n", "\t", "  \r\n ", "/* c */", "/**/", "/*+ hint */", "/* /*+ */ */", "/* -- */", "-- c\n",
        "${x}", "${env:HOME}", "/* ${spark.sql.p} */", "-- ${x}\n",
        # Spark's lexer continues a `--` comment past a newline after a backslash: the next line is comment
        # too (ended here, so the junk hides nothing of the statement: a comment that swallowed a token
        # would make another statement, not a hidden one).
        "-- \\\n swallowed by the comment\n", "/* a */-- \\\n\t-- \\\n\n",
        ";", ";\n"]
CASES = [str, str.upper, str.lower, str.swapcase, str.capitalize]


def _wordy(char: str) -> bool:
    return char.isalnum() or char == "_"


def hide(statement: str, data) -> str:
    """``statement`` with junk drawn at every token boundary and each token's case changed at random."""
    out = []
    for token in _TOKENS.findall(statement):
        junk = data.draw(st.lists(st.sampled_from(JUNK), max_size=2).map("".join))
        if not junk and out and _wordy(out[-1][-1:]) and _wordy(token[:1]):
            junk = " "  # two words run together would be one other word, not the statement hidden
        out += [junk, data.draw(st.sampled_from(CASES))(token)]
    out.append(data.draw(st.lists(st.sampled_from(JUNK), max_size=2).map("".join)))
    return "".join(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(ADMIN_ONLY), st.data())
def test_hiding_never_makes_an_admin_statement_a_readers(authorizer, statement, data):
    text = hide(statement, data)
    try:
        role = need(authorizer, text).role
    except SqlSyntaxError:
        return  # refused: it does not parse
    assert role in (R.ADMIN, planauth.NOBODY), text


@pytest.fixture(scope="module")
def checking(spark, password_file):
    """The gateway's own authoriser, with a password file: what every ExecuteStatement goes through."""
    return Authorizer(PasswordFile(password_file), load_builtins()).attach(SparkSessions(spark))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(ADMIN_ONLY), st.data())
def test_hiding_never_lets_a_reader_run_an_admin_statement(checking, statement, data):
    text = hide(statement, data)
    try:
        checking.check("rita", text)  # a reader
    except (PermissionDeniedError, SqlSyntaxError):
        return
    raise AssertionError(f"a reader may run {text!r}")


def test_the_checking_authoriser_lets_a_reader_read(checking):
    # The property above is not vacuous: the same authoriser allows a reader's query.
    checking.check("rita", "SELECT * FROM sys.lake_tiering_status")
    with pytest.raises(PermissionDeniedError):
        checking.check("rita", "DROP TABLE sys.procedure_roles")
