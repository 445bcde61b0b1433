"""What reaches executors (no JVM): with any master but ``local``, tierlake's
internal jar goes on ``spark.jars`` beside the Iceberg jars, so tasks that run
its classes (a fresh view's key probe and distributed form, ``file:`` through
LocalFileSystem) find them; tests/server/test_cluster.py runs them on a
standalone cluster."""

from __future__ import annotations

import pytest

from tierlake.server.app import JVM_FEATURES
from tierlake.server.config.config import Config
from tierlake.server.runtime import session
from tierlake.server.runtime.javaext import LOCAL_FILE_SYSTEM


@pytest.fixture
def internal(tmp_path, monkeypatch):
    jar = tmp_path / "jars" / "tierlake-internal-test.jar"
    monkeypatch.setattr(session, "internal_jar", lambda home: jar)  # no javac here
    return str(jar)


def settings(tmp_path, master: str, **conf: str) -> dict[str, str]:
    return session.spark_settings(Config.load(home=tmp_path, conf={"tierlake.master": master, **conf}), 12345,
                                 JVM_FEATURES)


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "local-cluster[1,1,1024]", "yarn",
                                    "k8s://https://127.0.0.1:6443"])
def test_a_cluster_master_ships_the_internal_jar_to_executors(tmp_path, internal, master):
    s = settings(tmp_path, master)
    jars = s["spark.jars"].split(",")
    assert internal in jars and any("iceberg" in j for j in jars), jars
    assert internal in s["spark.driver.extraClassPath"].split(":")
    assert s["spark.hadoop.fs.file.impl"] == LOCAL_FILE_SYSTEM  # the executors load it from that jar


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]"])
def test_a_local_master_has_the_classes_in_its_own_jvm(tmp_path, internal, master):
    s = settings(tmp_path, master)
    assert internal not in s["spark.jars"].split(",")
    assert internal in s["spark.driver.extraClassPath"].split(":")
    assert s["spark.hadoop.fs.file.impl"] == LOCAL_FILE_SYSTEM


def test_a_users_jars_and_packages_keep_the_internal_jar_on_a_cluster(tmp_path, internal):
    given = settings(tmp_path, "spark://127.0.0.1:7077", **{"spark.jars": "/opt/a.jar,/opt/b.jar"})
    assert given["spark.jars"].split(",") == ["/opt/a.jar", "/opt/b.jar", internal]
    packages = settings(tmp_path, "spark://127.0.0.1:7077",
                        **{"spark.jars.packages": "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0"})
    assert packages["spark.jars"].split(",") == [internal]
    local = settings(tmp_path, "local[2]", **{"spark.jars": "/opt/a.jar"})
    assert local["spark.jars"] == "/opt/a.jar"  # the user's setting wins, as any other


def test_executors_in_driver():
    assert session.executors_in_driver("local[4]") and session.executors_in_driver(" local ")
    assert not session.executors_in_driver("local-cluster[2,1,1024]")
    assert not session.executors_in_driver("spark://h:7077")
