"""Which metastore a configuration selects (no JVM), and the PostgreSQL lock-table script."""

import pytest

from tierlake import sql
from tierlake.server.config.config import Config
from tierlake.server.exceptions import ConfigError
from tierlake.server.metastore.database import JDO, LOCK_TABLES, POSTGRES_LOCK_TABLES, metastore_db
from tierlake.server.metastore.jvm import FEATURE
from tierlake.server.runtime import faults
from tierlake.server.runtime.session import spark_settings


@pytest.fixture
def driver_jar(tmp_path):
    jar = tmp_path / "postgresql.jar"
    jar.write_bytes(b"PK")
    return str(jar)


def test_default_is_embedded_derby_under_home(tmp_path):
    db = metastore_db(Config.load(home=tmp_path))
    assert not db.shared and db.jars == ()
    assert db.url == f"jdbc:derby:;databaseName={(tmp_path.resolve() / 'metastore_db').as_posix()};create=true"


def test_postgres_url_selects_a_shared_metastore_with_its_driver_on_the_class_path(tmp_path, driver_jar):
    config = Config.load(home=tmp_path, conf={
        "tierlake.metastore.url": "jdbc:postgresql://127.0.0.1:5433/ms", "tierlake.metastore.user": "hive",
        "tierlake.metastore.password": "pw", "tierlake.metastore.driver-jar": driver_jar})
    db = metastore_db(config)
    assert db.shared and db.kind == "postgresql"
    settings = spark_settings(config, 12345, [FEATURE])
    assert settings[JDO + "ConnectionURL"] == "jdbc:postgresql://127.0.0.1:5433/ms"
    assert settings[JDO + "ConnectionDriverName"] == "org.postgresql.Driver"
    assert settings[JDO + "ConnectionUserName"] == "hive"
    assert settings[JDO + "ConnectionPassword"] == "pw"
    assert settings["spark.driver.extraClassPath"].split(":")[0] == driver_jar
    assert driver_jar not in settings.get("spark.jars", "")  # executors need no metastore driver
    # Several JVMs share the database: Iceberg keeps its metastore locks, no JVM-local check.
    assert "spark.hadoop.iceberg.engine.hive.lock-enabled" not in settings
    assert "spark.hadoop.hive.metastore.alter.impl" not in settings


def test_embedded_derby_checks_commits_in_the_jvm_instead_of_locking(tmp_path):
    settings = spark_settings(Config.load(home=tmp_path), 12345, [FEATURE])
    assert settings["spark.hadoop.hive.metastore.alter.impl"] == "io.tierlake.internal.CasAlterHandler"
    assert settings["spark.hadoop.iceberg.engine.hive.lock-enabled"] == "false"
    assert settings["spark.hadoop.hive.server2.enable.doAs"] == "false"


def test_plain_hive_keys_work_too(tmp_path, driver_jar):
    config = Config.load(home=tmp_path, conf={
        JDO + "ConnectionURL": "jdbc:postgresql://db/ms", JDO + "ConnectionUserName": "u",
        JDO + "ConnectionPassword": "p", "tierlake.metastore.driver-jar": driver_jar})
    db = metastore_db(config)
    assert (db.url, db.user, db.password) == ("jdbc:postgresql://db/ms", "u", "p")


def test_bad_metastore_settings_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="unsupported metastore database 'jdbc:mysql:'"):
        metastore_db(Config.load(home=tmp_path, conf={"tierlake.metastore.url": "jdbc:mysql://h/db"}))
    with pytest.raises(ConfigError, match="driver-jar names a missing jar"):
        metastore_db(Config.load(home=tmp_path, conf={"tierlake.metastore.url": "jdbc:postgresql://h/db",
                                                      "tierlake.metastore.driver-jar": str(tmp_path / "nope.jar")}))


def test_postgres_lock_script_creates_every_lock_table_idempotently():
    text = "\n".join(line for line in sql.read(POSTGRES_LOCK_TABLES).splitlines() if not line.startswith("--"))
    statements = sql.split_statements(text)
    created = {s.split("IF NOT EXISTS", 1)[1].split()[0].upper() for s in statements if s.startswith("CREATE TABLE")}
    assert created == set(LOCK_TABLES)
    assert statements[0].startswith("SELECT pg_advisory_xact_lock(")  # before any DDL
    for s in statements[1:]:
        assert "IF NOT EXISTS" in s or s.startswith("INSERT INTO") and "WHERE NOT EXISTS" in s, s
    assert "for bit data" not in text.lower()  # Derby only


def test_a_fault_can_fire_on_the_nth_visit(monkeypatch):
    fired = []
    monkeypatch.setattr(faults, "_die", lambda: fired.append(True))
    monkeypatch.setattr(faults, "_hits", {})
    monkeypatch.setenv("TIERLAKE_FAULT", "after-lake-commit@3")
    for expected in ([], [], [True], [True]):
        faults.point("after-lake-commit")
        faults.point("after-plan")
        assert fired == expected
