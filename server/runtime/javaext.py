"""tierlake's own JVM classes (``server/runtime/java/*.java``), compiled once
with ``javac`` against pyspark's jars and cached under ``$TIERLAKE_HOME/jars``
(keyed by the sources' and pyspark's versions), like the relocated Jackson
jar in jars.py. They go on the driver's class path, and with any master but
``local`` on ``spark.jars`` too (runtime/session.py): tasks on executors run
KeySet (a fresh view's pending-key probe), the readers of IncrementalCatalog
and FreshEntries and FreshMerge's distributed form, and LocalFileSystem:

- ``io.tierlake.internal.PlanWalker`` flattens a parsed plan for the
  gateway's authorisation (server/gateway/auth/planauth.py);
- ``io.tierlake.internal.AuthzCheck`` is a session extension's check rule:
  the gateway's second line of authorisation, on the plans Spark resolved,
  for the client sessions the gateway bound to a role;
- ``io.tierlake.internal.SecretAuthenticator`` is the internal Spark Thrift
  Server's custom authentication provider (only the gateway gets in);
- ``io.tierlake.internal.SmallTables`` reads and rewrites the small ``sys``
  tables without a Spark job (server/state/state_table.py);
- ``io.tierlake.internal.LakeFiles`` tiers a log table's appends by copying
  their data files into the lake, without a Spark job
  (server/changelog/file_copy.py), and lists the data files of a
  primary-key chunk from the manifests (server/changelog/lake_write.py);
- ``io.tierlake.internal.StreamIngest`` stages and commits INSERTs into
  stream tables: values written without a Spark job, one committer per
  table, group commit, request ids (server/ingest/writer.py);
- ``io.tierlake.internal.LocalFileSystem`` is ``file:`` without a forked
  ``chmod`` per created file (``spark.hadoop.fs.file.impl``, on executors too);
- ``io.tierlake.internal.CasAlterHandler`` is the embedded metastore's
  ``alter_table``: an Iceberg commit lands only on the metadata it was based
  on (compare-and-set), so Iceberg needs no metastore locks
  (runtime/session.py);
- ``io.tierlake.internal.CachingObjectStore`` is the embedded metastore's
  ``RawStore``: ``getTable`` and ``getDatabase`` from memory while the row is
  unchanged (runtime/session.py);
- ``io.tierlake.internal.SessionViews`` is ``spark_catalog``: Iceberg's
  SparkSessionCatalog, whose ``CREATE OR REPLACE VIEW`` also replaces the
  view's text in the metastore, which Spark resolves the view by;
- ``org.apache.hadoop.hive.metastore.txn.TierlakeTxnHandler`` is the embedded
  metastore's lock store: a lock request of another application pauses the
  server's stream committers of that table until its commit lands;
- ``io.tierlake.internal.IncrementalCatalog`` is the read-only catalog
  ``tierlake_inc`` whose ``<db>.<table>.after_<snapshot>`` is an incremental
  (append) read of a stream table, the stream part of a fresh view
  (server/changelog/fresh_view.py);
- ``io.tierlake.internal.TaskErrorGuard`` keeps a task's OutOfMemoryError
  from exiting the JVM of a local master: the query fails, the server stays
  up, and starts ``io.tierlake.internal.TaskReaper``, which stops a killed
  task still computing one row two seconds later, so its core is free;
  ``io.tierlake.internal.StatementDeadline`` fails the Spark jobs of a
  statement past ``tierlake.query.timeout`` with an error that says so
  (server/runtime/resource_bounds.py).
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
from pathlib import Path

from tierlake.server.exceptions import JarResolutionError
from tierlake.server.runtime.jars import iceberg_runtime_jar, pyspark_jars_dir

log = logging.getLogger("tierlake.session")

SOURCES = Path(__file__).with_name("java")
PLAN_WALKER = "io.tierlake.internal.PlanWalker"
AUTHZ_CHECK = "io.tierlake.internal.AuthzCheck"
SECRET_AUTHENTICATOR = "io.tierlake.internal.SecretAuthenticator"
SMALL_TABLES = "io.tierlake.internal.SmallTables"
LAKE_FILES = "io.tierlake.internal.LakeFiles"
STREAM_INGEST = "io.tierlake.internal.StreamIngest"
# Compiled against the Iceberg runtime jar (left out when it is missing).
ICEBERG_SOURCES = {"SmallTables.java", "LakeFiles.java", "StreamIngest.java", "FreshEntries.java", "FreshMerge.java",
                   "SessionViews.java"}
LOCAL_FILE_SYSTEM = "io.tierlake.internal.LocalFileSystem"
INCREMENTAL_CATALOG = "io.tierlake.internal.IncrementalCatalog"
FRESH_MERGE = "io.tierlake.internal.FreshMerge"
SESSION_VIEWS = "io.tierlake.internal.SessionViews"
FRESH_LOCAL_ROWS_CONF = "spark.tierlake.fresh.local-merge-rows"  # FreshMerge.LOCAL_ROWS_CONF
CAS_ALTER_HANDLER = "io.tierlake.internal.CasAlterHandler"
CACHING_OBJECT_STORE = "io.tierlake.internal.CachingObjectStore"
TXN_HANDLER = "org.apache.hadoop.hive.metastore.txn.TierlakeTxnHandler"
TASK_ERROR_GUARD = "io.tierlake.internal.TaskErrorGuard"
STATEMENT_DEADLINE = "io.tierlake.internal.StatementDeadline"
INCREMENTAL_CATALOG_NAME = "tierlake_inc"  # spark.sql.catalog.<this>, set by runtime/session.py


def _key() -> str:
    digest = hashlib.sha256(importlib.metadata.version("pyspark").encode())
    for source in sorted(SOURCES.glob("*.java")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
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
                classpath, sources = [str(pyspark_jars_dir() / "*")], sorted(SOURCES.glob("*.java"))
                iceberg = iceberg_runtime_jar()
                if iceberg is None:  # SmallTables needs Iceberg's API; without it sys tables go through Spark
                    sources = [s for s in sources if s.name not in ICEBERG_SOURCES]
                else:
                    classpath.append(str(iceberg))
                result = subprocess.run(
                    [javac, "-nowarn", "-d", tmp, "-cp", os.pathsep.join(classpath), *[str(s) for s in sources]],
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
