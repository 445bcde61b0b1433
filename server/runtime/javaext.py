"""tierlake's own JVM classes, compiled once with ``javac`` against pyspark's
jars into one jar cached under ``$TIERLAKE_HOME/jars`` (keyed by the
sources' and pyspark's versions), like the relocated Jackson jar in jars.py.

Each feature keeps its JVM half beside its Python: ``server/<package>/java/``
(ingest: the group committer; changelog: fresh views' merge, catalog and
readers, the lake's file copy; catalog: Spark's key equality; state: the
small sys tables; gateway/auth: the resolved-plan check; metastore: the
embedded metastore's compare-and-set, cache and lock store, the session
catalog; bounds: statement deadlines, task errors and the task reaper;
runtime itself: Spark's parser helpers, the internal Thrift Server's
authenticator, ``file:`` without forks). All of them compile as one unit
(one Java package, ``io.tierlake.internal``), and a class refers only to
classes of its own or a lower layer (tests/test_architecture.py).

A feature also contributes what Spark must be started with — settings,
session extensions, class path, a step once the session is up — as a
``JvmFeature``; the composition root (server/app.py) lists them and
runtime/session.py merges them. The jar goes on the driver's class path, and
with any master but ``local`` on ``spark.jars`` too: tasks on executors run
KeySet, the readers of IncrementalCatalog and FreshEntries, FreshMerge's
distributed form, and LocalFileSystem.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierlake.server.config.config import Config
from tierlake.server.exceptions import JarResolutionError
from tierlake.server.runtime.jars import iceberg_runtime_jar, pyspark_jars_dir

log = logging.getLogger("tierlake.session")

# The server's source tree: every ``<package>/java/*.java`` under it is compiled.
SERVER = Path(__file__).resolve().parent.parent
PLAN_WALKER = "io.tierlake.internal.PlanWalker"
SECRET_AUTHENTICATOR = "io.tierlake.internal.SecretAuthenticator"
LOCAL_FILE_SYSTEM = "io.tierlake.internal.LocalFileSystem"


def sources() -> list[Path]:
    """Every feature's Java sources, in a stable order."""
    return sorted(SERVER.glob("**/java/*.java"), key=lambda p: p.relative_to(SERVER).as_posix())


def needs_iceberg(source: Path) -> bool:
    """Compiled against the Iceberg runtime jar, and left out when it is missing."""
    return "import org.apache.iceberg." in source.read_text()


@dataclass(frozen=True)
class JvmFeature:
    """What one feature adds to the Spark it runs in (merged by runtime/session.py).

    ``settings(config, user)`` returns Spark settings (``user``: the user's own
    ``spark.*`` settings, which win over every feature's); ``extensions`` are
    session extension classes, in order; ``classpath(config)`` is jars the
    driver needs before any SQL; ``started(spark, config, owns_metastore)``
    runs once the session is up.
    """

    name: str
    settings: Callable[[Config, Mapping[str, str]], dict[str, str]] | None = None
    extensions: tuple[str, ...] = ()
    classpath: Callable[[Config], list[str]] | None = None
    started: Callable[[Any, Config, bool], None] | None = None


def _key() -> str:
    digest = hashlib.sha256(importlib.metadata.version("pyspark").encode())
    for source in sources():
        digest.update(source.relative_to(SERVER).as_posix().encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def internal_jar(home: Path) -> Path:
    """The compiled jar, built on first use (a few seconds of ``javac``)."""
    dest = Path(home) / "jars" / f"tierlake-internal-{_key()}.jar"
    if dest.exists():
        return dest
    javac = shutil.which("javac", path=os.pathsep.join(
        p for p in [os.path.join(os.environ.get("JAVA_HOME", ""), "bin"), os.environ.get("PATH", "")] if p))
    if javac is None:
        raise JarResolutionError("javac (a JDK 17) is needed once, to compile tierlake's JVM classes")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / ".tierlake-internal.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if dest.exists():
                return dest
            with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
                classpath, files = [str(pyspark_jars_dir() / "*")], sources()
                iceberg = iceberg_runtime_jar()
                if iceberg is None:  # SmallTables needs Iceberg's API; without it sys tables go through Spark
                    files = [s for s in files if not needs_iceberg(s)]
                else:
                    classpath.append(str(iceberg))
                result = subprocess.run(
                    [javac, "-nowarn", "-d", tmp, "-cp", os.pathsep.join(classpath), *[str(s) for s in files]],
                    capture_output=True, text=True)
                if result.returncode != 0:
                    raise JarResolutionError(f"cannot compile tierlake's JVM classes: {result.stderr.strip()}")
                partial = Path(tmp) / "out.jar"
                with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
                    jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
                    for cls in sorted(Path(tmp).rglob("*.class")):
                        jar.write(cls, cls.relative_to(tmp).as_posix())
                os.replace(partial, dest)
            log.info("compiled %s", dest)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return dest
