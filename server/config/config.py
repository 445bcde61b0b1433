"""Server configuration: defaults < config file < ``--conf`` < explicit flags.

The file is ``$TIERLAKE_HOME/tierlake.conf`` (or ``--config FILE``) in the
``spark-defaults.conf`` format Spark users know: one ``key value`` or
``key=value`` per line, ``#`` comments. Keys starting with ``spark.`` go to
the SparkSession unchanged; ``tierlake.*`` keys are ours (docs/configuration.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from tierlake.server.config import settings
from tierlake.server.exceptions import ConfigError

# The built-in defaults as config text (``SETTINGS`` plus tierlake's Spark defaults).
DEFAULTS: dict[str, str] = settings.defaults()

CONFIG_FILE_NAME = "tierlake.conf"


def _conf_file_lines(path: Path) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
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
        out.append((key, value, lineno))
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


def check_keys(values: dict[str, str], source: str, lines: dict[str, int] | None = None) -> None:
    """Refuse an unknown ``tierlake.*`` key and a badly typed value; ``source`` says where they came from."""
    for key, raw in values.items():
        if not key.startswith(settings.PREFIX):
            continue
        where = f"{source}:{lines[key]}" if lines and key in lines else source
        if key not in settings.BY_KEY:
            raise ConfigError(f"{where}: unknown setting {key}{settings.did_you_mean(key)} "
                              "(the settings are listed in docs/configuration.md)")
        try:
            settings.BY_KEY[key].parse(raw)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e.message}") from None


@dataclass
class Config:
    """Resolved configuration of one server (or tiering-service) process.

    ``tierlake.*`` settings are read through the typed accessors
    (:meth:`setting`, :meth:`text`, :meth:`int`, :meth:`duration`, ...),
    which take their defaults from :data:`settings.SETTINGS`; ``get`` is for
    ``spark.*`` and other pass-through keys.
    """

    home: Path
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        home: str | Path | None = None,
        config_file: str | Path | None = None,
        conf: dict[str, str] | None = None,
        **flags: str | int | None,
    ) -> Config:
        home_path = Path(home) if home else default_home()
        home_path = home_path.expanduser().resolve()
        values = dict(DEFAULTS)
        file_path = Path(config_file) if config_file else home_path / CONFIG_FILE_NAME
        if config_file or file_path.exists():
            lines = _conf_file_lines(file_path)
            from_file = {key: value for key, value, _ in lines}
            check_keys(from_file, str(file_path), {key: lineno for key, _, lineno in lines})
            values.update(from_file)
        check_keys(conf or {}, "--conf")
        values.update(conf or {})
        from_flags = {f"tierlake.{key.replace('_', '.')}": str(value)
                      for key, value in flags.items() if value is not None}
        check_keys(from_flags, "command line")
        values.update(from_flags)
        return cls(home=home_path, values=values)

    @classmethod
    def defaults(cls) -> Config:
        """The built-in configuration, for code called without one (tests, tools)."""
        return cls(home=default_home(), values=dict(DEFAULTS))

    def get(self, key: str, default: str | None = None) -> str | None:
        """The raw text of ``key`` (``spark.*`` and pass-through keys); a
        ``tierlake.*`` key must be registered."""
        if key.startswith(settings.PREFIX):
            settings.lookup(key)
        return self.values.get(key, default)

    def setting(self, key: str) -> Any:
        """The typed value of a registered setting: its value here, else its default."""
        setting = settings.lookup(key)
        return setting.parse(self.values.get(key, setting.default))

    def text(self, key: str) -> str:
        """A str/path setting, stripped; ``""`` when empty or unset."""
        value = self._typed(key, ("str", "path", "secret"))
        return (value or "").strip()

    def int(self, key: str) -> int | None:
        """An integer setting; ``None`` when an optional one is empty."""
        return self._typed(key, ("int",))

    def duration(self, key: str) -> timedelta:
        return self._typed(key, ("duration",))

    def seconds(self, key: str) -> float:
        return self.duration(key).total_seconds()

    def flag(self, key: str) -> bool:
        return bool(self._typed(key, ("bool",)))

    def choice(self, key: str) -> str:
        return self._typed(key, ("choice",))

    def items(self, key: str) -> list[str]:
        """A comma-separated list setting."""
        return self._typed(key, ("list",))

    def _typed(self, key: str, types: tuple[str, ...]) -> Any:
        setting = settings.lookup(key)
        if setting.type not in types:
            raise settings.UnregisteredSettingError(f"{key} is a {setting.type} setting, not {'/'.join(types)}")
        return self.setting(key)

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
