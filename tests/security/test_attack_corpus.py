"""The attack corpus through the real gateway against the real Spark, as a
reader and as a writer: every entry is refused (42501, or Spark's parse
error) and its side effect is absent (no file created, the canary table and
the sys tables untouched, no setting changed); what stays legitimate still
works for each role."""

from __future__ import annotations

import uuid

import pytest
from pyhive import exc, hive

from tests.security import corpus
from tests.security.conftest import PASSWORD

pytestmark = pytest.mark.integration


def login(gw, user):
    return hive.connect("127.0.0.1", gw.port, username=user, password=PASSWORD[user], auth="CUSTOM")


@pytest.fixture(scope="module")
def target(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attack")
    secret = tmp / "secret.txt"
    secret.write_text("s3cret\n")
    db = "atk_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {db}.canary (id STRING) USING iceberg")
    spark.sql(f"INSERT INTO {db}.canary VALUES ('alive')")
    yield tmp, db, secret
    spark.sql(f"DROP DATABASE {db} CASCADE")


def test_the_corpus_is_refused_for_readers_and_writers(auth_gateway, spark, target):
    tmp, db, secret = target
    entries = corpus.load(tmp=str(tmp), db=db, secret=str(secret))
    assert len(entries) >= 80
    assert len(corpus.settings_of(entries)) >= 10  # every key the corpus tries to SET is re-read
    effects = corpus.Effects(spark, tmp, db, entries)
    failures = []
    for user in ("rita", "will"):  # reader, writer
        failures += corpus.run(auth_gateway.port, user, PASSWORD[user], entries, effects)
    assert failures == []
    assert sorted(p.name for p in tmp.iterdir()) == ["secret.txt"]  # no script ran, no directory written
    assert [tuple(r) for r in spark.sql(f"SELECT id FROM {db}.canary").collect()] == [("alive",)]
    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.System.getProperty("tierlake.attack") is None
    assert spark.conf.get("spark.sql.variable.substitute") == "false"


def test_an_effect_left_behind_is_reported(spark, target):
    # The checks above can fail: a canary with a second row, a file that exists.
    tmp, db, secret = target
    entries = [e for e in corpus.load(tmp=str(tmp), db=db, secret=str(secret))
               if e["effect"].get("table") == "canary" or e["effect"].get("file") == "t0"][:2]
    effects = corpus.Effects(spark, tmp, db, entries)
    assert all(effects.left_by(e) == [] for e in entries)
    spark.sql(f"INSERT INTO {db}.canary VALUES ('x')")
    (tmp / "t0").write_text("")
    try:
        assert all(effects.left_by(e) for e in entries)
    finally:
        (tmp / "t0").unlink()
        spark.sql(f"DELETE FROM {db}.canary WHERE id = 'x'")


def error_of(cursor, statement):
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
    return info.value.args[0].status


def test_legitimate_work_goes_on_for_each_role(auth_gateway, target):
    _, db, _ = target
    with login(auth_gateway, "rita") as reader, login(auth_gateway, "will") as writer, \
            login(auth_gateway, "ann") as admin:
        r, w, a = reader.cursor(), writer.cursor(), admin.cursor()
        # Readers: sys views, metadata, settings of their session, EXPLAIN of a query, USE.
        r.execute("SELECT count(*) FROM sys.lake_tiering_status")
        assert r.fetchall()[0][0] >= 0
        r.execute(f"SHOW TABLES IN {db}")
        assert ("canary" in str(r.fetchall()))
        r.execute("SET spark.sql.session.timeZone = UTC")
        r.execute(f"EXPLAIN SELECT * FROM {db}.canary")
        r.execute(f"USE {db}")
        r.execute("SELECT id FROM canary")  # unqualified: the session's current database
        assert r.fetchall() == [("alive",)]
        r.execute("CALL sys.version()")
        assert error_of(r, "INSERT INTO canary VALUES ('r')").sqlState == "42501"
        # Writers: rows of tables outside sys, unqualified after USE too.
        w.execute(f"USE {db}")
        w.execute("INSERT INTO canary VALUES ('w')")
        w.execute(f"WITH x AS (SELECT 'cte' AS id) INSERT INTO {db}.canary SELECT * FROM x")
        w.execute("DELETE FROM canary WHERE id IN ('w', 'cte')")
        status = error_of(w, f"CREATE TABLE {db}.w_ddl (id INT)")
        assert status.sqlState == "42501" and "CREATE TABLE needs the admin role" in status.errorMessage
        # Admins: DDL, tiered DDL included.
        a.execute(f"CREATE TABLE {db}.tiered (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')")
        a.execute(f"DROP TABLE {db}.tiered")
        status = error_of(a, "SET spark.sql.variable.substitute=true")
        assert status.sqlState == "42501" and "variable substitution stays off" in status.errorMessage
        status = error_of(r, "SELEC 1")
        assert status.sqlState == "42601" and "PARSE_SYNTAX_ERROR" in status.errorMessage
