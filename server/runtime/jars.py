"""Locate the Iceberg runtime jars and rebuild Iceberg's shaded Jackson.

The Iceberg Spark runtime jar comes offline from the PyPI package
``snowpark-connect-deps-iceberg``. That copy was stripped of Iceberg's shaded
Jackson (``org/apache/iceberg/shaded/com/fasterxml/jackson/...``), so Iceberg
fails with ``NoClassDefFoundError`` as soon as it touches JSON metadata. We
rebuild those classes once, like maven-shade would, by relocating pyspark's own
Jackson jars, and cache the result under ``$TIERLAKE_HOME/jars``.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import logging
import os
import re
import struct
import tempfile
import time
import zipfile
from pathlib import Path

from tierlake.server.exceptions import JarResolutionError

log = logging.getLogger(__name__)

# Bump whenever the relocation output changes, so cached jars get rebuilt.
RELOCATOR_VERSION = "2"
_MARKER = "Tierlake-Relocator-Version"
_PKG = "snowpark_connect_deps_iceberg"
_INSTALL_HINT = "pip install snowpark-connect-deps-iceberg"
_JACKSON_JARS = ("jackson-core", "jackson-databind", "jackson-annotations", "jackson-datatype-jsr310")
_SHADED = "org/apache/iceberg/shaded/"

# The lookbehind keeps already-relocated names from being prefixed twice.
# Matching raw bytes is safe for modified UTF-8: every byte of a multi-byte
# sequence is >= 0x80, so an ASCII pattern can never match inside one.
_SLASH_RE = re.compile(rb"(?<!org/apache/iceberg/shaded/)com/fasterxml/jackson")
_DOT_RE = re.compile(rb"(?<!org\.apache\.iceberg\.shaded\.)com\.fasterxml\.jackson")
_SLASH_TO = b"org/apache/iceberg/shaded/com/fasterxml/jackson"
_DOT_TO = b"org.apache.iceberg.shaded.com.fasterxml.jackson"

# Size in bytes (tag included) of every fixed-size constant-pool entry.
_CP_SIZES = {3: 5, 4: 5, 5: 9, 6: 9, 7: 3, 8: 3, 16: 3, 19: 3, 20: 3,
             9: 5, 10: 5, 11: 5, 12: 5, 17: 5, 18: 5, 15: 4}
_SIGNATURE_RE = re.compile(r"META-INF/([^/]+\.(SF|RSA|DSA|EC)|SIG-[^/]+)$", re.I)
_VERSIONED_RE = re.compile(r"(META-INF/versions/\d+/)(.*)$")
_MULTI_RELEASE_RE = re.compile(rb"^Multi-Release:\s*true\s*$", re.I | re.M)


def _relocate_bytes(data: bytes) -> bytes:
    return _DOT_RE.sub(_DOT_TO, _SLASH_RE.sub(_SLASH_TO, data))


def _relocate_class(data: bytes) -> bytes:
    """Rewrite every CONSTANT_Utf8 of a class file; copy all else verbatim."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    (count,) = struct.unpack_from(">H", data, 8)
    out, start, pos, index = [], 0, 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            end = pos + 3 + length
            old = data[pos + 3:end]
            new = _relocate_bytes(old)
            if new != old:
                if len(new) > 0xFFFF:
                    raise ValueError("relocated constant exceeds 65535 bytes")
                # Flush the unchanged run, then the re-encoded constant.
                out += [data[start:pos], struct.pack(">BH", 1, len(new)), new]
                start = end
            pos = end
        elif tag in _CP_SIZES:
            pos += _CP_SIZES[tag]
            if tag in (5, 6):  # Long/Double occupy two constant-pool slots
                index += 1
        else:
            raise ValueError(f"unknown constant-pool tag {tag} at offset {pos}")
        index += 1
    out.append(data[start:])
    return b"".join(out)


def _relocate_path(name: str) -> str:
    # Entries under META-INF/versions/N/ are relocated below that prefix.
    match = _VERSIONED_RE.match(name)
    prefix, rest = match.groups() if match else ("", name)
    if rest.startswith("com/fasterxml/jackson/"):
        rest = _SHADED + rest
    return prefix + rest


def _manifest(multi_release: bool) -> bytes:
    lines = ["Manifest-Version: 1.0", "Created-By: tierlake server.jars"]
    if multi_release:
        lines.append("Multi-Release: true")
    lines.append(f"{_MARKER}: {RELOCATOR_VERSION}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def relocate_jackson(source_jars: list[Path], dest: Path) -> Path:
    """Relocate ``com.fasterxml.jackson`` in ``source_jars`` into one jar.

    Classes, resource paths (also under ``META-INF/versions/N/``) and
    ``META-INF/services`` files are moved to
    ``org.apache.iceberg.shaded.com.fasterxml.jackson``. ``module-info.class``
    entries and jar signatures are dropped: both would describe the
    unrelocated classes. ``dest`` is written atomically and returned.
    """
    files: dict[str, tuple[zipfile.ZipInfo, bytes]] = {}
    services: dict[str, list[bytes]] = {}
    multi_release = False
    for jar in source_jars:
        with zipfile.ZipFile(jar) as zin:
            for info in zin.infolist():
                name = info.filename
                if info.is_dir() or _SIGNATURE_RE.match(name):
                    continue  # directories are regenerated below
                if name.rsplit("/", 1)[-1] == "module-info.class":
                    continue
                if name == "META-INF/MANIFEST.MF":  # replaced by our own manifest
                    multi_release |= bool(_MULTI_RELEASE_RE.search(zin.read(info)))
                    continue
                if name == "META-INF/INDEX.LIST":  # would list the old paths
                    continue
                data = zin.read(info)
                if name.startswith("META-INF/services/"):
                    # Service file names are class names, and so are its lines;
                    # files from different jars with the same name are merged.
                    new = "META-INF/services/" + _relocate_bytes(
                        name[len("META-INF/services/"):].encode()).decode()
                    services.setdefault(new, []).append(_relocate_bytes(data))
                    continue
                if name.endswith(".class"):
                    data = _relocate_class(data)
                # First one wins for duplicates such as META-INF/LICENSE.
                files.setdefault(_relocate_path(name), (info, data))

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zout:
            # JarInputStream only finds the manifest among the first entries.
            zout.writestr("META-INF/", b"")
            zout.writestr("META-INF/MANIFEST.MF", _manifest(multi_release))
            names = sorted(files) + sorted(services)
            dirs = {n[: i + 1] for n in names for i, c in enumerate(n) if c == "/"}
            for directory in sorted(dirs - {"META-INF/"}):
                zout.writestr(directory, b"")
            for name in sorted(files):
                info, data = files[name]
                zout.writestr(zipfile.ZipInfo(name, info.date_time), data,
                              compress_type=zipfile.ZIP_DEFLATED)
            for name in sorted(services):
                body = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in services[name])
                zout.writestr(name, body)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; Spark may run as another user
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def pyspark_jars_dir() -> Path:
    """Return the ``jars`` directory of the installed pyspark package."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarResolutionError("pyspark is not installed")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    if not jars.is_dir():
        raise JarResolutionError(f"pyspark has no jars directory at {jars}")
    return jars


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.stem.rsplit("-", 1)[-1]))


def _single(directory: Path, pattern: str) -> Path:
    # Several versions side by side: take the newest rather than failing.
    found = sorted(directory.glob(pattern), key=_version_key)
    if not found:
        raise JarResolutionError(f"no {pattern} in {directory}")
    return found[-1]


def _runtime_jar() -> Path:
    spec = importlib.util.find_spec(_PKG)
    if spec is None or not spec.submodule_search_locations:
        raise JarResolutionError(
            f"the Iceberg runtime jar is missing; run `{_INSTALL_HINT}` "
            "or set TIERLAKE_ICEBERG_JARS")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    # The runtime must match pyspark's Spark minor version and Scala version,
    # or Spark fails with obscure linkage errors much later.
    spark = ".".join(importlib.metadata.version("pyspark").split(".")[:2])
    scala = _version_key(_single(pyspark_jars_dir(), "scala-library-*.jar"))[:2]
    pattern = f"iceberg-spark-runtime-{spark}_{scala[0]}.{scala[1]}-*.jar"
    try:
        return _single(jars, pattern)
    except JarResolutionError as exc:
        raise JarResolutionError(f"{exc.message}; reinstall with `{_INSTALL_HINT}`") from None


def iceberg_runtime_jar() -> Path | None:
    """The Iceberg Spark runtime jar as installed (its API is what tierlake's
    JVM classes compile against, server/runtime/javaext.py); None if absent."""
    try:
        return _runtime_jar()
    except JarResolutionError:
        return None


def _is_current(jar: Path) -> bool:
    try:
        with zipfile.ZipFile(jar) as z:
            manifest = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    return f"{_MARKER}: {RELOCATOR_VERSION}" in manifest.splitlines()


def _shaded_jackson_jar(home: Path) -> Path:
    pyspark_jars = pyspark_jars_dir()
    sources = [_single(pyspark_jars, f"{n}-[0-9]*.jar") for n in _JACKSON_JARS]
    version = sources[1].stem.rsplit("-", 1)[-1]  # databind's version
    dest = home / "jars" / f"iceberg-shaded-jackson-{version}.jar"
    if _is_current(dest):  # fast path: os.replace makes a present jar complete
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / ".iceberg-shaded-jackson.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _is_current(dest):  # another process built it while we waited
                return dest
            log.info("Building relocated Jackson jar %s from %s",
                     dest, ", ".join(p.name for p in sources))
            started = time.monotonic()
            try:
                relocate_jackson(sources, dest)
            except (ValueError, zipfile.BadZipFile) as exc:  # corrupt input jar
                raise JarResolutionError(f"could not build {dest}: {exc}") from exc
            log.info("Built %s in %.2f s", dest.name, time.monotonic() - started)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return dest


def resolve_iceberg_jars(home: Path, override: str | None = None) -> list[Path]:
    """Return the jars that put Iceberg on Spark's classpath.

    ``override`` is the value of ``TIERLAKE_ICEBERG_JARS``: paths separated by
    ``os.pathsep`` or commas, returned as given (each must exist). Otherwise
    returns the Iceberg Spark runtime jar from ``snowpark-connect-deps-iceberg``
    plus the relocated Jackson jar cached in ``home/jars``, built on first use.
    Raises :class:`JarResolutionError` when a jar is missing or cannot be built.
    """
    if override and override.strip():
        parts = re.split(f"[,{re.escape(os.pathsep)}]", override)
        paths = [Path(p.strip()).expanduser() for p in parts if p.strip()]
        for path in paths:
            if not path.exists():
                raise JarResolutionError(f"TIERLAKE_ICEBERG_JARS names a missing jar: {path}")
        return paths
    runtime = _runtime_jar()
    try:
        shaded = _shaded_jackson_jar(Path(home))
    except OSError as exc:  # e.g. home/jars not writable, disk full
        raise JarResolutionError(f"cannot build the relocated Jackson jar: {exc}") from exc
    return [runtime, shaded]
