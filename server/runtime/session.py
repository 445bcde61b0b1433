"""The SparkSession: Iceberg's SparkSessionCatalog over a Hive metastore.

Everything lives under ``$TIERLAKE_HOME``: the Derby metastore, the warehouse,
logs and the rebuilt Jackson jar. See docs/design.md, 'Stack decisions', for
why each setting is what it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import re
import secrets
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tierlake.server.config.config import Config
from tierlake.server.exceptions import HomeInUseError
from tierlake.server.runtime.jars import resolve_iceberg_jars
from tierlake.server.runtime.javaext import LOCAL_FILE_SYSTEM, SECRET_AUTHENTICATOR, JvmFeature, internal_jar
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.log_setup import log4j2_config

log = logging.getLogger("tierlake.session")


class HomeLock:
    """An exclusive lock on ``$TIERLAKE_HOME``.

    Embedded Derby lets only one JVM open the metastore; a second server on
    the same home would otherwise fail deep inside Hive with an unreadable
    error (or, with a shared file system, corrupt it).
    """

    def __init__(self, home: Path):
        self.path = home / "tierlake.lock"
        self._fd: int | None = None

    def acquire(self) -> HomeLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise HomeInUseError(
                f"TIERLAKE_HOME {self.path.parent} is in use by another tierlake process "
                f"(pid {owner}); stop it or start this one with --home DIR"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


# Iceberg catalog over the same metastore whose commits take metastore locks (embedded metastore only).
LOCKING_CATALOG = "tierlake_locking"

def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


LOOPBACK = "127.0.0.1"
DRIVER_ADDRESS_KEYS = ("spark.driver.bindAddress", "spark.driver.host")
# Any of these names the driver's shared secret; none given: a fresh one per process.
SECRET_SOURCES = ("spark.authenticate.secret", "spark.authenticate.secret.file",
                  "spark.authenticate.secret.driver.file")
# SET and SET key pass every (key, value) through SQLConf.redactOptions: this
# pattern, then spark.redaction.regex (secret|password|token|access key), each
# searched in the key and in the value. Spark's default here is (?i)url; this
# adds keys that name hosts, ports, paths, jars and JVM options, and values
# that are paths, URIs or IP addresses. SET -v (SQLConf.getAllDefinedConfs)
# redacts nothing: it lists SQL settings only (spark.sql.warehouse.dir among them).
REDACTION_OPTIONS_REGEX = (
    r"(?i)url"
    r"|[.]\w*(host|port|address|dirs?|paths?|location|uris?|jars|files?|archives|classpath|javaoptions)$"
    r"|^(/|file:)|://|\b\d{1,3}([.]\d{1,3}){3}\b"
)
REDACTION_KEY = "spark.sql.redaction.options.regex"
# Kept off spark-submit's command line, which every local user can read in
# /proc/<pid>/cmdline (pyspark's launch_gateway passes its conf as --conf
# arguments): these reach the JVM's SparkConf through py4j instead.
_SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.]?key")


def is_loopback(host: str) -> bool:
    """``host`` (an address or a name) is loopback only; a name that does not resolve is not."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def driver_bind(user: Mapping[str, str]) -> str | None:
    """The address the user's settings make the driver listen on (Spark falls
    back from spark.driver.bindAddress to spark.driver.host); None: not given."""
    for key in DRIVER_ADDRESS_KEYS:
        value = (user.get(key) or "").strip()
        if value:
            return value
    return None


def network_settings(user: Mapping[str, str], master: str = "local[*]") -> dict[str, str]:
    """Where the driver's RPC and block-manager ports listen, and Spark's own
    authentication when they listen beyond loopback.

    Neither address given: both 127.0.0.1. One given that is not loopback (a
    cluster whose executors must reach the driver): ``spark.authenticate`` and
    ``spark.network.crypto.enabled`` on, with a random secret made for this
    process unless the user names one. User settings are applied after these
    and win, with a warning."""
    bind = driver_bind(user)
    if bind is None:
        if not re.fullmatch(r"local(-cluster)?(\[.*\])?", master):
            log.warning("the Spark driver listens on %s only: executors of %s on other hosts cannot reach it; "
                        "set spark.driver.host (and spark.driver.bindAddress) to widen it, which turns on "
                        "spark.authenticate", LOOPBACK, master)
        return {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK}
    if is_loopback(bind):
        return {}
    settings = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
    if (user.get("spark.authenticate") or "").strip().lower() == "false":
        # Spark refuses to start with crypto on and authentication off ("spark.authenticate must be
        # enabled when enabling encryption"): the user's choice stands, so crypto stays off too.
        del settings["spark.network.crypto.enabled"]
    if not any((user.get(key) or "").strip() for key in SECRET_SOURCES):
        settings["spark.authenticate.secret"] = secrets.token_hex(32)
    log.warning("the Spark driver's RPC and block-manager ports listen on %s (not loopback): "
                "spark.authenticate and spark.network.crypto.enabled are on", bind)
    for key in ("spark.authenticate", "spark.network.crypto.enabled"):
        given = (user.get(key) or "").strip()
        if given and given.lower() != "true":
            log.warning("%s=%s as configured: the driver's ports on %s take connections %s", key, given, bind,
                        "from anyone who can reach them" if key == "spark.authenticate" else "unencrypted")
    if (user.get("spark.ui.enabled") or "").strip().lower() == "true":
        log.warning("the Spark UI (spark.ui.enabled) has no login and listens on SPARK_LOCAL_IP, "
                    "else on every address; spark.authenticate does not cover it")
    return settings


def jvm_environment(user: Mapping[str, str]) -> dict[str, str]:
    """Variables the driver JVM starts with. Spark's UI (WebUI.bind) and a
    local-cluster's master and workers listen on SPARK_LOCAL_IP, else on every
    address: loopback too, unless the user widened the driver."""
    bind = driver_bind(user)
    if bind is not None and not is_loopback(bind):
        return {}
    current = os.environ.get("SPARK_LOCAL_IP")
    if current and current != LOOPBACK:
        log.warning("SPARK_LOCAL_IP=%s ignored: the Spark driver listens on %s (set spark.driver.bindAddress "
                    "and spark.driver.host to widen it)", current, LOOPBACK)
    return {"SPARK_LOCAL_IP": LOOPBACK}


def launch_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings that may go on spark-submit's command line: no secrets."""
    return {k: v for k, v in settings.items() if not _SECRET_KEY.search(k)}


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


TIERING_POOL = "tiering"
_FAIR_POOLS = """<?xml version="1.0"?>
<allocations>
  <pool name="default"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>1</minShare></pool>
  <pool name="tiering"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>1</minShare></pool>
</allocations>
"""


def fair_scheduler_file(home: Path) -> Path:
    """The FAIR scheduler's pools (``default`` for client statements, ``tiering`` for rounds)."""
    path = home / "conf" / "fairscheduler.xml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_FAIR_POOLS, encoding="utf-8")
    return path


def executors_in_driver(master: str) -> bool:
    """A ``local`` master: tasks run in the driver's JVM, with its class path.
    Any other (``local-cluster``, ``spark://``, YARN, K8s) starts executor JVMs
    that have only Spark's jars and what ``spark.jars`` brings them."""
    return re.fullmatch(r"local(\[.*\])?", master.strip()) is not None


def spark_settings(config: Config, thrift_port: int, features: Sequence[JvmFeature] = ()) -> dict[str, str]:
    """Every Spark setting of the server: its own, then each feature's (in
    ``features``' order), the user's last (they win)."""
    home = config.home
    settings = {
        "spark.app.name": "tierlake",
        "spark.sql.extensions": ",".join(
            ["org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
             *(extension for feature in features for extension in feature.extensions)]),
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": config.warehouse_dir.as_uri(),
        "spark.hadoop.hive.metastore.warehouse.dir": config.warehouse_dir.as_uri(),
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        # The internal Spark Thrift Server: loopback only, and only the
        # gateway may log in (SASL PLAIN with this process's secret, checked
        # by SecretAuthenticator.java); the gateway authenticates users.
        "spark.hadoop.hive.server2.thrift.bind.host": "127.0.0.1",
        "spark.hadoop.hive.server2.thrift.port": str(thrift_port),
        "spark.hadoop.hive.server2.authentication": "CUSTOM",
        "spark.hadoop.hive.server2.custom.authentication.class": SECRET_AUTHENTICATOR,
        "spark.hadoop.hive.server2.transport.mode": "binary",
        # Statements run as the server's own user, not as the gateway's login
        # (a proxy user). Hive keeps one metastore client per thread and
        # rebuilds it, with a new HiveConf and a new Derby RawStore (~20-50 ms
        # of CPU), whenever the user on a thread differs from the user the
        # shared client was made for: with impersonation every switch between
        # a Thrift session and a server thread did that (a fifth of the JVM's
        # CPU with 30 tables tiering).
        "spark.hadoop.hive.server2.enable.doAs": "false",
        # GetOperationStatus long-polls this long while a statement runs; 1 s
        # keeps progress displays (tierlake sql, beeline) responsive.
        "spark.hadoop.hive.server2.long.polling.timeout": "1000ms",
        "spark.sql.hive.thriftServer.singleSession": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # Rounds of several tables run at once in the pool `tiering`, client
        # statements in `default`; FAIR shares the cores between the two
        # pools and within each, so neither starves the other.
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": fair_scheduler_file(home).as_uri(),
    }
    jvm_log = log4j2_config(config.logs_dir, config.setting("tierlake.log.jvm-level"))
    java_opts = [
        f"-Dlog4j2.configurationFile={jvm_log.as_uri()}",
        f"-Dderby.system.home={home.as_posix()}",
        f"-Dderby.stream.error.file={(config.logs_dir / 'derby.log').as_posix()}",
    ]
    user = config.spark_conf()
    for feature in features:
        if feature.settings is not None:
            settings.update(feature.settings(config, user))
    # A feature's jars (the metastore's JDBC driver) are needed by the driver
    # JVM only (Hive's metastore code runs there), and before any SQL: the class path.
    internal = str(internal_jar(home))
    classpath = [jar for feature in features if feature.classpath is not None
                 for jar in feature.classpath(config)] + [internal]
    executor_jars: list[str] = []
    if "spark.jars.packages" not in user:
        jars = resolve_iceberg_jars(home, os.environ.get("TIERLAKE_ICEBERG_JARS"))
        # Both: spark.jars alone is not seen by the Thrift Server's handler
        # threads (DATA_SOURCE_NOT_FOUND: iceberg), the driver classpath is.
        # Executors (spark://, YARN, K8s) fetch spark.jars from the driver.
        executor_jars += [str(j) for j in jars]
        classpath += [str(j) for j in jars]
    if not executors_in_driver(config.text("tierlake.master")):
        # Tasks run tierlake's classes too: a fresh view's pending-key probe
        # (KeySet) and its distributed form (FreshMerge's functions, the
        # IncrementalCatalog and FreshEntries readers), file: through
        # LocalFileSystem. Executors in other JVMs get them from spark.jars,
        # like the Iceberg jars: without it a fresh view with pending changes
        # failed on the executor (ClassCastException: cannot assign instance of
        # SerializedLambda to field MapPartitionsRDD.f; issue 50).
        executor_jars.append(internal)
        given = [j for j in (user.get("spark.jars") or "").split(",") if j.strip()]
        if given and internal not in given:
            # A user's spark.jars wins over the Iceberg jars, as any setting does, but
            # never drops the classes the server's own plans need on executors.
            user["spark.jars"] = ",".join(given + [internal])
    if executor_jars:
        settings["spark.jars"] = ",".join(executor_jars)
    if classpath:
        settings["spark.driver.extraClassPath"] = os.pathsep.join(classpath)
    # Executors have the class (see LocalFileSystem.java): in this JVM with a
    # local master, from spark.jars otherwise.
    settings["spark.hadoop.fs.file.impl"] = LOCAL_FILE_SYSTEM
    extra = user.pop("spark.driver.extraJavaOptions", "")
    settings["spark.driver.extraJavaOptions"] = " ".join(java_opts + ([extra] if extra else []))
    settings.update(network_settings(user, config.text("tierlake.master")))
    settings[REDACTION_KEY] = REDACTION_OPTIONS_REGEX
    if user.get(REDACTION_KEY, REDACTION_OPTIONS_REGEX) != REDACTION_OPTIONS_REGEX:
        log.warning("%s as configured: SET may show a reader the driver's host, ports and paths", REDACTION_KEY)
    settings.update(user)
    # Spark would substitute ${…} in a statement's text after the gateway
    # authorised its parse (and leak ${env:…}); no setting turns it on.
    settings["spark.sql.variable.substitute"] = "false"
    return settings


def _start_jvm(master: str, settings: dict[str, str], env: Mapping[str, str] | None = None) -> None:
    """Start the driver JVM in a process group of its own (pyspark would start it in ours).

    A SIGTERM to the whole group (systemd's stop, a terminal's kill of the job)
    would otherwise reach the JVM too, which shuts Spark down at once while
    the Python side still stops in order: heartbeats then failed with
    "V1Table(sys.tiering_tables) is not an Iceberg table" and rounds were cut
    mid-MERGE. The JVM still dies with this process: pyspark's gateway exits
    when its stdin pipe closes, also after ``kill -9``."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._active_spark_context is not None:
        return
    launch = SparkConf().setMaster(master).set("spark.sql.catalogImplementation", "hive")
    launch.setAll(list(launch_settings(settings).items()))
    # launch_gateway hands the JVM a copy of os.environ and takes no env of its own.
    with _environment(env or {}):
        gateway = launch_gateway(launch, popen_kwargs={"start_new_session": True})
    conf = SparkConf().setMaster(master).set("spark.sql.catalogImplementation", "hive")
    conf.setAll(list(settings.items()))
    SparkContext(conf=conf, gateway=gateway)


def build_spark(config: Config, thrift_port: int, features: Sequence[JvmFeature],
                owns_metastore: bool = True) -> Any:
    """Create the SparkSession (the JVM starts here).

    ``owns_metastore``: this process's metastore is the embedded Derby one
    (the server); tiering-service processes use the server's (through its
    metastore service) or the shared PostgreSQL one instead.
    """
    from pyspark.sql import SparkSession

    config.home.mkdir(parents=True, exist_ok=True)
    # Executors of a cluster master start Python workers with this
    # interpreter; the default "python3" may lack pyspark.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = spark_settings(config, thrift_port, features)
    _start_jvm(config.text("tierlake.master"), settings, jvm_environment(config.spark_conf()))
    builder = SparkSession.builder.master(config.text("tierlake.master"))
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()
    log.info("SparkSession started: Spark %s, master %s", spark.version, spark.sparkContext.master)
    # Opening the metastore creates its Derby schema on first start.
    spark.sql("SHOW DATABASES").collect()
    for feature in features:
        if feature.started is not None:
            feature.started(spark, config, owns_metastore)
    return spark


def start_thrift_server(spark: Any, secret: str) -> Any:
    """Start the Spark Thrift Server in this JVM, on the internal port; its
    only login is ``secret`` (kept in the JVM, not in any setting)."""
    jvm = spark.sparkContext._jvm
    jvm.io.tierlake.internal.SecretAuthenticator.setSecret(secret)
    # Hive's PLAIN callback looks the provider class up in a fresh HiveConf,
    # which sees system properties but not Spark's Hadoop settings.
    jvm.java.lang.System.setProperty("hive.server2.custom.authentication.class", SECRET_AUTHENTICATOR)
    server = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext()
    )
    return server


def private_session(spark: Any) -> Any:
    """A session of its own for one thread's work (a tiering round), cloned from ``spark``.

    Cloned, not new: it starts with everything the server's session has
    (runtime settings, registered functions), then settings it changes
    (the bucketed MERGE's storage-partitioned join), its temp views and its
    active-session binding stay its own; no other round and no client
    session sees them. SparkContext, catalogs' metastore clients and cached
    data are shared."""
    from pyspark.sql import SparkSession

    jvm = spark.sparkContext._jvm
    # cloneSession is private[sql] in Scala but public in the bytecode, as pyspark's py4j calls see it.
    session = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
    jclass("org.apache.spark.sql.SparkSession", jvm).setActiveSession(session._jsparkSession)
    return session


def activate(spark: Any) -> None:
    """Bind ``spark`` as this thread's active Spark session: Iceberg's Spark3Util and the session
    catalog's view loads resolve through it, and a py4j thread other than the one that made the
    session has none (or another's)."""
    jclass("org.apache.spark.sql.SparkSession", spark.sparkContext._jvm).setActiveSession(spark._jsparkSession)


def iceberg_table(spark: Any, name: str, locking: bool = False) -> Any:
    """The Iceberg ``Table`` (Java) behind ``name`` in the session catalog.

    ``locking``: loaded through :data:`LOCKING_CATALOG` where the server
    commits without metastore locks, so the table's commits take them (and
    the stream committers of this process hold back for them).

    Spark3Util resolves names through the thread's *active* SparkSession; a
    py4j thread other than the one that built the session has none and gets
    Spark's V1 table instead ("V1Table(...) is not an Iceberg table").
    """
    jvm = spark.sparkContext._jvm
    activate(spark)
    if locking and spark.conf.get(f"spark.sql.catalog.{LOCKING_CATALOG}", None):
        name = f"{LOCKING_CATALOG}.{name}"
    return jclass("org.apache.iceberg.spark.Spark3Util", jvm).loadIcebergTable(spark._jsparkSession, name)
