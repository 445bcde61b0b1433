"""Which role each statement needs, without a JVM."""

import pytest

from tierlake.procedures import load_builtins
from tierlake.server.exceptions import PermissionDeniedError
from tierlake.server.gateway.authz import Authorizer, classify
from tierlake.server.gateway.passwords import PasswordFile, set_user
from tierlake.server.sqlapi import roles as R


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
    ("SET -v", R.READER),
    ("SET TIME ZONE 'UTC'", R.READER),
    ("RESET", R.READER),
    ("SET spark.sql.catalog.evil=com.example.Evil", R.ADMIN),
    ("SET `spark.sql.extensions` = x", R.ADMIN),
    ("SET spark.hadoop.fs.defaultFS=file:///", R.ADMIN),
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
    ("CREATE TABLE shop.t (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')", R.ADMIN),
    ("ALTER TABLE shop.t SET TBLPROPERTIES ('table.datalake.freshness'='1 s')", R.ADMIN),
    ("DROP TABLE shop.t", R.ADMIN),
    ("TRUNCATE TABLE shop.t", R.ADMIN),
    ("ADD JAR /tmp/evil.jar", R.ADMIN),
    ("CALL spark_catalog.system.expire_snapshots('shop.t')", R.ADMIN),
    ("SELECT reflect('java.lang.System', 'exit', 0)", R.ADMIN),
    ("SELECT `java_method` /* x */ ('java.lang.System', 'exit', 0)", R.ADMIN),
    ("SELECT * FROM text.`/etc/passwd`", R.ADMIN),
    ("SELECT 1; DROP TABLE shop.t", R.ADMIN),
    ("this is not sql ((", R.ADMIN),
    ("CALL sys.version()", R.READER),
    ("call SYS.list_tiering_statuses('a.b')", R.READER),
    ("CALL sys.heartbeat('job')", R.TIERING),
    ("CALL sys.enable_tiering('a.b')", R.ADMIN),
    ("CALL sys.retry_tiering(table => 'a.b')", R.ADMIN),
    ("CALL sys.nosuch()", R.READER),  # the handler says "unknown procedure"
    ("CALL sys.version(", R.READER),  # the handler says "syntax error"
])
def test_classify(statement, role):
    assert classify(statement, None, load_builtins()).role == role


def test_without_a_registry_the_default_registry_gives_the_role():
    load_builtins()
    assert classify("CALL sys.acquire_lease('job', 'a.b')").role == R.TIERING
    assert classify("CALL sys.some_extension()").role == R.ADMIN


def test_unqualified_writes_follow_the_current_database():
    assert classify("INSERT INTO tiering_tables VALUES (1)", "sys").role == R.ADMIN
    assert classify("INSERT INTO tiering_tables VALUES (1)", "shop").role == R.WRITER


@pytest.fixture
def authorizer(tmp_path):
    path = tmp_path / "users"
    for user, role in [("ann", "admin"), ("rita", "reader"), ("will", "writer"), ("ts", "tiering-service")]:
        set_user(path, user, "pw", frozenset({role}))
    return Authorizer(PasswordFile(path), load_builtins())


def test_denials_name_the_statement_the_role_needed_and_the_user(authorizer):
    with pytest.raises(PermissionDeniedError) as info:
        authorizer.check("rita", "CALL sys.heartbeat('j')")
    assert info.value.sqlstate == "42501"
    assert info.value.message == ("permission denied: CALL sys.heartbeat needs the tiering-service role; "
                                  "user 'rita' has reader")
    with pytest.raises(PermissionDeniedError, match="INSERT needs the admin or writer role; user 'rita' has reader"):
        authorizer.check("rita", "INSERT INTO shop.t VALUES (1)")
    with pytest.raises(PermissionDeniedError, match="needs the tiering-service role; user 'ann' has admin"):
        authorizer.check("ann", "CALL sys.heartbeat('j')")
    with pytest.raises(PermissionDeniedError, match="has no role"):
        authorizer.check("stranger", "SELECT 1")


def test_grants(authorizer):
    authorizer.check("rita", "SELECT * FROM sys.tiering_rounds")
    authorizer.check("will", "INSERT INTO shop.t VALUES (1)")
    authorizer.check("ts", "CALL sys.heartbeat('j')")
    authorizer.check("ts", "CALL sys.server_info()")
    authorizer.check("ann", "DROP TABLE shop.t")
    with pytest.raises(PermissionDeniedError):
        authorizer.check("will", "CALL sys.enable_tiering('shop.t')")


def test_development_mode_allows_everything():
    dev = Authorizer(None)
    assert not dev.enabled and dev.authenticate("anyone", "") and dev.roles("x") == set(R.ROLES)
    dev.check("anyone", "CALL sys.heartbeat('j')")
    dev.check(None, "DROP TABLE x")
