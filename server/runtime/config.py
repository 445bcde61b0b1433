"""Server configuration: defaults < config file < ``--conf`` < explicit flags.

The file is ``$TIERLAKE_HOME/tierlake.conf`` (or ``--config FILE``) in the
``spark-defaults.conf`` format Spark users know: one ``key value`` or
``key=value`` per line, ``#`` comments. Keys starting with ``spark.`` go to
the SparkSession unchanged; ``tierlake.*`` keys are ours (docs/configuration.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tierlake.server.exceptions import ConfigError

DEFAULTS: dict[str, str] = {
    "tierlake.gateway.host": "127.0.0.1",
    "tierlake.gateway.port": "10000",
    "tierlake.gateway.auth": "PLAIN",
    "tierlake.gateway.password-file": "",
    "tierlake.gateway.ssl.certfile": "",
    "tierlake.gateway.ssl.keyfile": "",
    "tierlake.client.password-file": "",
    "tierlake.client.ssl.ca-file": "",
    "tierlake.master": "local[*]",
    "tierlake.extensions": "",
    "tierlake.thrift.internal-port": "0",
    "tierlake.lake.database-suffix": "_lake",
    "tierlake.tiering.heartbeat-timeout": "2 min",
    "tierlake.tiering.retry-backoff": "5 s",
    "tierlake.tiering.retry-backoff-max": "5 min",
    "tierlake.coordinator.interval": "5 s",
    "tierlake.tiering.workers": "1",
    "tierlake.metastore.port": "",
    "tierlake.metastore.url": "",
    "tierlake.metastore.user": "",
    "tierlake.metastore.driver-jar": "",
    "tierlake.tiering.poll-interval": "1 s",
    "tierlake.tiering.chunk-rows": "5000000",
    "tierlake.kv.snapshot.interval": "10 min",
    "tierlake.kv.snapshot.num-retained": "2",
    "tierlake.kv.maintenance-interval": "1 min",
    "tierlake.quality.sample-size": "10",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
}

CONFIG_FILE_NAME = "tierlake.conf"


def parse_conf_file(path: Path) -> dict[str, str]:
    """Parse a spark-defaults style file."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, value = _split(line)
        if not key:
            raise ConfigError(f"{path}:{lineno}: expected 'key value' or 'key=value', got {raw!r}")
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str]:
    eq = line.find("=")
    ws = next((i for i, c in enumerate(line) if c.isspace()), -1)
    if eq > 0 and (ws < 0 or eq < ws):
        return line[:eq].strip(), line[eq + 1 :].strip()
    if ws > 0:
        return line[:ws], line[ws:].strip()
    return "", ""


def parse_conf_args(pairs: list[str]) -> dict[str, str]:
    """Parse ``--conf key=value`` arguments."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--conf expects key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def default_home() -> Path:
    return Path(os.environ.get("TIERLAKE_HOME", ".tierlake"))


@dataclass
class Config:
    """Resolved configuration of one server (or tiering-service) process."""

    home: Path
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        home: str | Path | None = None,
        config_file: str | Path | None = None,
        conf: dict[str, str] | None = None,
        **flags: str | int | None,
    ) -> "Config":
        home_path = Path(home) if home else default_home()
        home_path = home_path.expanduser().resolve()
        values = dict(DEFAULTS)
        file_path = Path(config_file) if config_file else home_path / CONFIG_FILE_NAME
        if config_file or file_path.exists():
            values.update(parse_conf_file(file_path))
        values.update(conf or {})
        for key, value in flags.items():
            if value is not None:
                values[f"tierlake.{key.replace('_', '.')}"] = str(value)
        return cls(home=home_path, values=values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def get_int(self, key: str, default: int | None = None) -> int:
        raw = self.values.get(key)
        if raw is None:
            if default is None:
                raise ConfigError(f"missing configuration {key}")
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {raw!r}") from None

    def spark_conf(self) -> dict[str, str]:
        return {k: v for k, v in self.values.items() if k.startswith("spark.")}

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def warehouse_dir(self) -> Path:
        return self.home / "warehouse"

    @property
    def metastore_dir(self) -> Path:
        return self.home / "metastore_db"
