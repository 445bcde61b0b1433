import pytest

from tierlake.server.config.config import Config, parse_conf_args
from tierlake.server.exceptions import ConfigError


def test_precedence_defaults_file_conf_flags(tmp_path):
    (tmp_path / "tierlake.conf").write_text(
        "# comment\n"
        "tierlake.gateway.port 10001\n"
        "spark.sql.shuffle.partitions=8\n"
        "spark.executor.memory   2g\n"
    )
    cfg = Config.load(home=tmp_path, conf={"spark.sql.shuffle.partitions": "2"}, gateway_host="0.0.0.0")
    assert cfg.get("tierlake.gateway.port") == "10001"
    assert cfg.get("tierlake.gateway.host") == "0.0.0.0"
    assert cfg.spark_conf()["spark.sql.shuffle.partitions"] == "2"
    assert cfg.spark_conf()["spark.executor.memory"] == "2g"
    assert cfg.home == tmp_path.resolve()
    assert cfg.logs_dir == tmp_path.resolve() / "logs"


def test_bad_values_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="--conf expects key=value"):
        parse_conf_args(["novalue"])
    (tmp_path / "bad.conf").write_text("lonely\n")
    with pytest.raises(ConfigError, match="bad.conf:1"):
        Config.load(home=tmp_path, config_file=tmp_path / "bad.conf")
    with pytest.raises(ConfigError, match="--conf: tierlake.gateway.port must be an integer"):
        Config.load(home=tmp_path, conf={"tierlake.gateway.port": "abc"})
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.load(home=tmp_path, config_file=tmp_path / "missing.conf")


def test_typed_accessors_take_registry_defaults(tmp_path):
    cfg = Config.load(
        home=tmp_path, conf={"tierlake.tiering.poll-interval": "0.2 s", "tierlake.gateway.auth": "nosasl"}
    )
    assert cfg.duration("tierlake.tiering.poll-interval").total_seconds() == 0.2
    assert cfg.duration("tierlake.coordinator.interval").total_seconds() == 5
    assert cfg.int("tierlake.tiering.workers") == 1
    assert cfg.int("tierlake.metastore.port") is None
    assert cfg.choice("tierlake.gateway.auth") == "NOSASL"
    assert cfg.text("tierlake.lake.database-suffix") == "_lake"
    assert cfg.setting("tierlake.metastore.password") is None
    assert Config(home=tmp_path).int("tierlake.gateway.port") == 10000  # values without the defaults
