"""Unit tests for server.jars: Jackson relocation and Iceberg jar resolution.

No Spark is started; the Java checks run plain ``java`` on tiny programs.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import struct
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from tierlake.server.exceptions import JarResolutionError
from tierlake.server.runtime import jars

SHADED = "org/apache/iceberg/shaded/com/fasterxml/jackson/"
OBJECT_MAPPER = SHADED + "databind/ObjectMapper.class"


def utf8_constants(data: bytes) -> list[bytes]:
    """Independent class-file constant-pool parser: every CONSTANT_Utf8."""
    assert data[:4] == b"\xca\xfe\xba\xbe"
    sizes = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 16: 2, 19: 2, 20: 2,
             9: 4, 10: 4, 11: 4, 12: 4, 17: 4, 18: 4, 15: 3}
    (count,) = struct.unpack_from(">H", data, 8)
    pos, index, found = 10, 1, []
    while index < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            found.append(data[pos + 3:pos + 3 + length])
            pos += 3 + length
        else:
            pos += 1 + sizes[tag]
            index += tag in (5, 6)  # Long/Double take two slots
        index += 1
    # The access flags follow the pool; a plausible this_class index proves
    # the walk ended exactly at the pool's end.
    (_, this_class) = struct.unpack_from(">HH", data, pos)
    assert 0 < this_class < count
    return found


def unrelocated(constant: bytes) -> bool:
    rest = constant.replace(SHADED.rstrip("/").encode(), b"").replace(
        SHADED.rstrip("/").replace("/", ".").encode(), b"")
    return b"com/fasterxml/jackson" in rest or b"com.fasterxml.jackson" in rest


@pytest.fixture(scope="module")
def jackson_jars() -> list[Path]:
    return [next(jars.pyspark_jars_dir().glob(f"{name}-[0-9]*.jar"))
            for name in ("jackson-core", "jackson-databind", "jackson-annotations")]


@pytest.fixture(scope="module")
def relocated(tmp_path_factory, jackson_jars) -> Path:
    dest = tmp_path_factory.mktemp("relocated") / "shaded-jackson.jar"
    assert jars.relocate_jackson(jackson_jars, dest) == dest
    return dest


@pytest.fixture(scope="module")
def runtime_jar() -> Path:
    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    jar_dir = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return next(jar_dir.glob("iceberg-spark-runtime-3.5_2.12-*.jar"))


def test_relocated_classes_reference_only_shaded_jackson(relocated):
    with zipfile.ZipFile(relocated) as z:
        names = z.namelist()
        assert OBJECT_MAPPER in names
        assert not [n for n in names if n.startswith("com/fasterxml/")]
        assert not [n for n in names if n.endswith("module-info.class")]
        # Multi-release classes of jackson-core move below their version dir.
        assert ("META-INF/versions/11/" + SHADED + "core/io/doubleparser/FastDoubleSwar.class"
                in names)
        manifest = z.read("META-INF/MANIFEST.MF").decode()
        assert "Multi-Release: true" in manifest
        assert f"Tierlake-Relocator-Version: {jars.RELOCATOR_VERSION}" in manifest

        constants = utf8_constants(z.read(OBJECT_MAPPER))
        assert SHADED.encode() + b"databind/ObjectMapper" in constants
        assert not [c for c in constants if unrelocated(c)]

        classes = [n for n in names if n.endswith(".class")]
        assert len(classes) > 900
        bad = {n for n in classes for c in utf8_constants(z.read(n)) if unrelocated(c)}
        assert not bad


def test_relocating_twice_changes_nothing(relocated, tmp_path):
    again = jars.relocate_jackson([relocated], tmp_path / "again.jar")
    with zipfile.ZipFile(relocated) as first, zipfile.ZipFile(again) as second:
        assert sorted(first.namelist()) == sorted(second.namelist())
        changed = [n for n in first.namelist() if n.endswith(".class")
                   and first.read(n) != second.read(n)]
        assert not changed


def test_services_resources_signatures(tmp_path):
    source = tmp_path / "in.jar"
    with zipfile.ZipFile(source, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
        z.writestr("META-INF/services/com.fasterxml.jackson.core.JsonFactory",
                   "com.fasterxml.jackson.core.JsonFactory\n")
        z.writestr("META-INF/services/java.sql.Driver",
                   "org.apache.iceberg.shaded.com.fasterxml.jackson.Already\n")
        z.writestr("com/fasterxml/jackson/core/data.properties", "x=1\n")
        z.writestr("module-info.class", b"\xca\xfe\xba\xbe")
        z.writestr("META-INF/SIGNER.SF", "sig")
        z.writestr("META-INF/SIGNER.RSA", "sig")
    out = jars.relocate_jackson([source], tmp_path / "out.jar")
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        factory = "org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory"
        assert z.read(f"META-INF/services/{factory}") == f"{factory}\n".encode()
        assert "META-INF/services/com.fasterxml.jackson.core.JsonFactory" not in names
        # Already relocated names are not prefixed a second time.
        assert z.read("META-INF/services/java.sql.Driver") == (
            b"org.apache.iceberg.shaded.com.fasterxml.jackson.Already\n")
        assert z.read(SHADED + "core/data.properties") == b"x=1\n"
        assert not names & {"module-info.class", "META-INF/SIGNER.SF", "META-INF/SIGNER.RSA"}
        assert "Multi-Release" not in z.read("META-INF/MANIFEST.MF").decode()
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


JSON_SMOKE = """
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

public class JsonSmoke {
  public static void main(String[] args) throws Exception {
    Class<?> cls = Class.forName(
        "org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper");
    ObjectMapper mapper = (ObjectMapper) cls.getDeclaredConstructor().newInstance();
    System.out.println(mapper.writeValueAsString(java.util.Map.of("a", 1)));
  }
}
"""

ICEBERG_SMOKE = """
import org.apache.iceberg.Schema;
import org.apache.iceberg.SchemaParser;
import org.apache.iceberg.types.Types;

public class IcebergSmoke {
  public static void main(String[] args) {
    Schema schema = new Schema(Types.NestedField.required(1, "id", Types.LongType.get()));
    String json = SchemaParser.toJson(schema);
    System.out.println(json);
    System.out.println(SchemaParser.fromJson(json).asStruct());
  }
}
"""


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory, relocated, runtime_jar) -> Path:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("javac/java not on PATH: cannot compile the Java smoke programs")
    root = tmp_path_factory.mktemp("java")
    sources = []
    for name, text in (("JsonSmoke", JSON_SMOKE), ("IcebergSmoke", ICEBERG_SMOKE)):
        sources.append(root / f"{name}.java")
        sources[-1].write_text(text)
    classes = root / "classes"
    classpath = os.pathsep.join(map(str, (relocated, runtime_jar)))
    subprocess.run(["javac", "-d", str(classes), "-cp", classpath, *map(str, sources)],
                   check=True, capture_output=True, timeout=60)
    return classes


def run_java(main: str, *classpath: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "-cp", os.pathsep.join(map(str, classpath)), main],
                          capture_output=True, text=True, timeout=60)


def test_relocated_objectmapper_serializes(java_classes, relocated):
    # Only the relocated jar: proves nothing still needs unrelocated Jackson.
    result = run_java("JsonSmoke", relocated, java_classes)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '{"a":1}'


def test_iceberg_uses_relocated_jackson(java_classes, relocated, runtime_jar):
    result = run_java("IcebergSmoke", runtime_jar, relocated, java_classes)
    assert result.returncode == 0, result.stderr
    assert '"name":"id"' in result.stdout
    assert "1: id: required long" in result.stdout
    # Control: the runtime jar alone lacks the shaded Jackson classes.
    broken = run_java("IcebergSmoke", runtime_jar, java_classes)
    assert broken.returncode != 0
    assert "NoClassDefFoundError: " + SHADED in broken.stderr


def test_override_missing_path_is_named(tmp_path):
    missing = tmp_path / "nope.jar"
    with pytest.raises(JarResolutionError, match="nope.jar") as info:
        jars.resolve_iceberg_jars(tmp_path, f"{__file__},{missing}")
    assert str(missing) in info.value.message


def test_override_accepts_pathsep_and_commas(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.jar", "b.jar", "c.jar"))
    for p in (a, b, c):
        p.write_bytes(b"")
    override = f"{a}{os.pathsep}{b}, {c}"
    assert jars.resolve_iceberg_jars(tmp_path / "home", override) == [a, b, c]
    assert not (tmp_path / "home").exists()


def test_missing_package_gives_install_hint(tmp_path, monkeypatch):
    # A None entry in sys.modules makes find_spec report the package absent.
    monkeypatch.setitem(sys.modules, "snowpark_connect_deps_iceberg", None)
    with pytest.raises(JarResolutionError, match="pip install snowpark-connect-deps-iceberg"):
        jars.resolve_iceberg_jars(tmp_path)


def test_resolve_builds_once_then_reuses_cache(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tierlake.server.runtime.jars")
    home = tmp_path / "home"
    results: list[list[Path]] = []
    # Two concurrent first starts: the file lock lets exactly one build.
    threads = [threading.Thread(target=lambda: results.append(jars.resolve_iceberg_jars(home)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1]
    runtime, shaded = results[0]
    assert runtime.name.startswith("iceberg-spark-runtime-3.5_2.12-")
    assert shaded.parent == home / "jars"
    assert shaded.name.startswith("iceberg-shaded-jackson-2.")
    assert len([r for r in caplog.records if r.getMessage().startswith("Building")]) == 1
    assert any(r.getMessage().startswith("Built") for r in caplog.records)

    mtime = shaded.stat().st_mtime_ns
    caplog.clear()
    assert jars.resolve_iceberg_jars(home) == [runtime, shaded]
    assert shaded.stat().st_mtime_ns == mtime
    assert not [r for r in caplog.records if r.getMessage().startswith("Building")]

    # A jar from another relocator version is rebuilt.
    with zipfile.ZipFile(shaded, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n"
                   "Tierlake-Relocator-Version: 0\r\n\r\n")
    assert jars.resolve_iceberg_jars(home) == [runtime, shaded]
    with zipfile.ZipFile(shaded) as z:
        assert OBJECT_MAPPER in z.namelist()
