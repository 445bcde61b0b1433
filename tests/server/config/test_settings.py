"""The settings and table-property registries: complete, documented, enforced (no JVM)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tierlake.server import config_docs
from tierlake.server.catalog import properties
from tierlake.server.config import settings
from tierlake.server.config.config import Config
from tierlake.server.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / settings.DOC_PATH
REGENERATE = "python -m tierlake.server.config_docs --write"
# Every package's Python: the engine (all of server/), procedures/, udfs/, sql/ and the client distribution.
PACKAGES = ("server", "procedures", "udfs", "sql", "clients/python/tierlake_client")
SOURCES = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
# File names that look like keys: tierlake.conf, the Python log, the home lock.
FILE_NAMES = {"tierlake.conf", "tierlake.log", "tierlake.lock"}
KEYLIKE = re.compile(r"^tierlake\.[a-z][a-z0-9-]*(\.[a-z0-9-]+)*$")
# Table/commit property keys tierlake spells: Fluss-style, Iceberg's own, tiering commit keys.
PROPERTYLIKE = re.compile(r"^(table\.|kv\.|write\.|history\.|tiering\.)[a-z0-9.-]*[a-z0-9]$"
                          r"|^(primary-key|bucket\.num|sequence-by|format-version|commit-user)$")


def _string_literals(path: Path) -> list[tuple[str, int]]:
    """(text, line) of the string constants of ``path``, except logger names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loggers = {id(node.args[0]) for node in ast.walk(tree)
               if isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", None) == "getLogger"}
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in loggers]


def _is_module(name: str) -> bool:
    parts = name.split(".")[1:]
    return (ROOT.joinpath(*parts).with_suffix(".py").exists() or ROOT.joinpath(*parts).is_dir())


def test_docs_tables_are_generated_from_the_registries():
    text = DOC.read_text(encoding="utf-8")
    assert config_docs.render_doc(text) == text, f"{settings.DOC_PATH} is out of date: run `{REGENERATE}`"


def test_every_registered_key_is_in_the_docs():
    text = DOC.read_text(encoding="utf-8")
    keys = [*settings.BY_KEY, *settings.SPARK_DEFAULTS, *properties.BY_KEY, *properties.COMMIT_BY_KEY]
    missing = [key for key in keys if f"`{key}`" not in text]
    assert not missing, f"not in {settings.DOC_PATH}: {missing}; run `{REGENERATE}`"


def test_every_tierlake_key_in_the_source_is_registered():
    registered = set(settings.BY_KEY) | set(properties.BY_KEY) | set(properties.COMMIT_BY_KEY)
    unknown = []
    for path in SOURCES:
        for text, line in _string_literals(path):
            if KEYLIKE.match(text) and text not in FILE_NAMES and not _is_module(text) and text not in registered:
                unknown.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert not unknown, "keys used but not registered in server/config/settings.py or " \
                        "server/catalog/properties.py:\n" + "\n".join(unknown)


def test_every_property_key_in_the_source_is_registered():
    registered = set(properties.BY_KEY) | set(properties.COMMIT_BY_KEY)
    unknown = [f"{path.relative_to(ROOT)}:{line}: {text}" for path in SOURCES
               for text, line in _string_literals(path) if PROPERTYLIKE.match(text) and text not in registered]
    for template in sorted((ROOT / "sql").rglob("*.j2")):  # templates/ and views/
        for key in re.findall(r"'([a-z][a-z0-9.-]*)'\s*=", template.read_text(encoding="utf-8")):
            if key not in registered:
                unknown.append(f"{template.relative_to(ROOT)}: {key}")
    assert not unknown, "property keys used but not registered in server/catalog/properties.py:\n" + "\n".join(unknown)


def test_property_keys_are_defined_once():
    # Outside the registry, a property key is imported, never spelled again as a module constant.
    keys = set(properties.BY_KEY) | set(properties.COMMIT_BY_KEY)
    again = []
    for path in SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "server/catalog/properties.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in keys:
                again.append(f"{rel}:{node.lineno}: {node.value.value}")
    assert not again, again


def test_registry_defaults_parse_and_are_unique():
    assert len(settings.BY_KEY) == len(settings.SETTINGS)
    assert len(properties.BY_KEY) == len(properties.TABLE_PROPERTIES)
    for setting in settings.SETTINGS:
        assert setting.type in settings.TYPES, setting.key
        assert setting.key.startswith(settings.PREFIX), setting.key
        setting.parse(setting.default)
    for prop in properties.TABLE_PROPERTIES:
        assert prop.setting is None or prop.setting in settings.BY_KEY, prop.key
        assert prop.fallback is None or prop.fallback in properties.BY_KEY, prop.key


def test_unknown_key_is_refused_with_did_you_mean(tmp_path):
    with pytest.raises(ConfigError, match=r"--conf: unknown setting tierlake.gateway.prot; "
                                          r"did you mean tierlake.gateway.port\?"):
        Config.load(home=tmp_path, conf={"tierlake.gateway.prot": "1"})
    (tmp_path / "tierlake.conf").write_text("# settings\nspark.ui.enabled true\ntierlake.tiering.worker 2\n")
    with pytest.raises(ConfigError, match=r"tierlake.conf:3: unknown setting tierlake.tiering.worker; "
                                          r"did you mean tierlake.tiering.workers\?"):
        Config.load(home=tmp_path)
    # Other namespaces pass through untouched.
    (tmp_path / "tierlake.conf").write_text("spark.whatever 1\nhive.anything 2\n")
    assert Config.load(home=tmp_path).get("hive.anything") == "2"


@pytest.mark.parametrize("key, value, message", [
    ("tierlake.coordinator.interval", "soon", "tierlake.coordinator.interval: cannot parse 'soon'"),
    ("tierlake.tiering.workers", "two", "tierlake.tiering.workers must be an integer"),
    ("tierlake.tiering.workers", "-1", "tierlake.tiering.workers must be at least 0"),
    ("tierlake.gateway.auth", "KERBEROS", "tierlake.gateway.auth must be one of PLAIN, NOSASL"),
])
def test_bad_typed_value_is_refused_naming_the_key(tmp_path, key, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.load(home=tmp_path, conf={key: value})
    (tmp_path / "other.conf").write_text(f"{key} {value}\n")
    with pytest.raises(ConfigError, match=re.escape(f"other.conf:1: {message}")):
        Config.load(home=tmp_path, config_file=tmp_path / "other.conf")


def test_reading_an_unregistered_key_is_a_programming_error(tmp_path):
    config = Config.load(home=tmp_path)
    with pytest.raises(settings.UnregisteredSettingError, match="did you mean tierlake.tiering.chunk-rows"):
        config.int("tierlake.tiering.chunk-row")
    with pytest.raises(settings.UnregisteredSettingError):
        config.get("tierlake.nothing")
    with pytest.raises(settings.UnregisteredSettingError, match="is a duration setting"):
        config.int("tierlake.coordinator.interval")


def test_table_property_defaults_resolve_settings_and_fallbacks():
    config = Config(home=Path("."), values={"tierlake.tiering.chunk-rows": "7"})
    assert properties.read({}, properties.CHUNK_ROWS, config) == 7
    assert properties.read({properties.CHUNK_ROWS: "3"}, properties.CHUNK_ROWS, config) == 3
    assert properties.read({}, properties.NUM_RETAINED) == 2
    assert properties.read({}, properties.NUM_RETAINED, Config(home=Path("."))) == 2
    assert properties.read({}, properties.MAX_ROUND).total_seconds() == 60
    assert properties.read({properties.FRESHNESS_PROPERTY: "5 s"}, properties.MAX_ROUND).total_seconds() == 5
    assert properties.read({}, properties.LOG_TTL) is None


def test_only_an_embedded_metastore_gets_the_lock_free_commit_path():
    """CasAlterHandler, CachingObjectStore and TierlakeTxnHandler run only where
    the metastore's code runs in this JVM: not for PostgreSQL, not for a remote
    metastore service (a stock Hive metastore would lose commits lock-free)."""
    from types import SimpleNamespace

    from tierlake.server.metastore.jvm import embedded_metastore

    derby, postgres = SimpleNamespace(shared=False), SimpleNamespace(shared=True)
    assert embedded_metastore(derby, {}) is True
    assert embedded_metastore(derby, {"spark.hadoop.hive.metastore.uris": "thrift://127.0.0.1:9083"}) is False
    assert embedded_metastore(derby, {"hive.metastore.uris": "thrift://h:9083"}) is False
    assert embedded_metastore(derby, {"spark.hadoop.hive.metastore.uris": " "}) is True
    assert embedded_metastore(postgres, {}) is False


def test_the_key_scans_cover_every_package():
    scanned = {path.relative_to(ROOT).parts[:2] for path in SOURCES}
    server_packages = {("server", p.name) for p in (ROOT / "server").iterdir() if (p / "__init__.py").exists()}
    assert server_packages <= scanned, server_packages - scanned
    for top in ("procedures", "udfs", "sql", "clients"):
        assert any(parts[0] == top for parts in scanned), top
