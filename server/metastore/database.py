"""Where the Hive metastore lives: embedded Derby, or a shared PostgreSQL.

Embedded Derby (the default) is private to one JVM. ``tierlake.metastore.url``
(or the plain ``spark.hadoop.javax.jdo.option.ConnectionURL``) points every
process — the server and any number of ``tierlake tiering-service`` processes —
at one PostgreSQL database instead; each runs Hive's metastore code in its own
JVM against it, and Hive's lock tables there serialise Iceberg commits across
all of them (docs/design.md, 'Commit safety').
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from tierlake import sql
from tierlake.server.config.config import Config
from tierlake.server.exceptions import ConfigError, MigrationError
from tierlake.server.runtime import jvm_errors

log = logging.getLogger("tierlake.metastore")

JDO = "spark.hadoop.javax.jdo.option."
POSTGRES_LOCK_TABLES = "metastore/postgres_lock_tables.sql"
# Debian's libpostgresql-jdbc-java installs the driver here.
POSTGRES_JARS = ("/usr/share/java/postgresql.jar",)

# Tables Hive's TxnDbUtil.prepDb creates; Iceberg's HiveTableOperations takes
# metastore locks in HIVE_LOCKS, so they must exist before the first commit.
LOCK_TABLES = (
    "TXNS", "TXN_COMPONENTS", "COMPLETED_TXN_COMPONENTS", "NEXT_TXN_ID",
    "HIVE_LOCKS", "NEXT_LOCK_ID", "COMPACTION_QUEUE", "NEXT_COMPACTION_QUEUE_ID",
    "COMPLETED_COMPACTIONS", "AUX_TABLE", "WRITE_SET",
)


@dataclass(frozen=True)
class MetastoreDb:
    """The metastore database of one process."""

    url: str
    driver: str
    user: str | None = None
    password: str | None = None
    jars: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return "postgresql" if self.url.startswith("jdbc:postgresql:") else "derby"

    @property
    def shared(self) -> bool:
        """Several processes may use it at once (everything but embedded Derby)."""
        return self.kind != "derby"

    @property
    def display_url(self) -> str:
        """The URL without its parameters, which may carry a password."""
        return self.url.split("?", 1)[0]

    def spark_settings(self) -> dict[str, str]:
        out = {JDO + "ConnectionURL": self.url, JDO + "ConnectionDriverName": self.driver}
        if self.user:
            out[JDO + "ConnectionUserName"] = self.user
        if self.password is not None:
            out[JDO + "ConnectionPassword"] = self.password
        return out

    def hive_conf(self, hconf: Any) -> Any:
        """Set this database on a Java ``HiveConf`` (for prepDb, the metastore service)."""
        for key, value in self.spark_settings().items():
            hconf.set(key[len("spark.hadoop."):], value)
        return hconf


def derby_url(config: Config) -> str:
    return f"jdbc:derby:;databaseName={config.metastore_dir.as_posix()};create=true"


def metastore_db(config: Config) -> MetastoreDb:
    """The metastore database ``config`` selects.

    ``tierlake.metastore.url`` wins over the plain JDO key; neither means the
    embedded Derby database under ``$TIERLAKE_HOME``.
    """
    url = config.text("tierlake.metastore.url") or (config.get(JDO + "ConnectionURL") or "").strip()
    if not url or url.startswith("jdbc:derby:"):
        return MetastoreDb(url or derby_url(config), "org.apache.derby.jdbc.EmbeddedDriver")
    if not url.startswith("jdbc:postgresql:"):
        raise ConfigError(
            f"unsupported metastore database {url.split('//')[0]!r}: tierlake.metastore.url takes "
            "jdbc:postgresql://HOST:PORT/DATABASE (or leave it empty for the embedded Derby metastore)"
        )
    user = (config.text("tierlake.metastore.user") or config.get(JDO + "ConnectionUserName") or "").strip()
    password = config.setting("tierlake.metastore.password")
    if password is None:
        password = config.get(JDO + "ConnectionPassword")
    jar = config.text("tierlake.metastore.driver-jar")
    if not jar:
        jar = next((j for j in POSTGRES_JARS if os.path.exists(j)), "")
        if not jar:
            raise ConfigError(
                "no PostgreSQL JDBC driver: install Debian's libpostgresql-jdbc-java "
                f"({POSTGRES_JARS[0]}) or set tierlake.metastore.driver-jar"
            )
    elif not os.path.exists(jar):
        raise ConfigError(f"tierlake.metastore.driver-jar names a missing jar: {jar}")
    return MetastoreDb(url, "org.postgresql.Driver", user or None, password, (jar,))


def ensure_lock_tables(spark: Any, db: MetastoreDb) -> None:
    """Create Hive's transaction/lock tables where they are missing."""
    if db.kind == "postgresql":
        _ensure_postgres(spark, db)
    else:
        _ensure_derby(spark, db)


def check_remote_locks(spark: Any, uris: str) -> None:
    """Refuse a metastore service whose lock tables are missing, before the first commit.

    Against a service (``hive.metastore.uris``) the server commits with Iceberg's
    metastore locks, which Hive keeps in its transaction tables (HIVE_LOCKS …). A
    service whose schema DataNucleus created (``datanucleus.schema.autoCreateAll``)
    rather than ``schematool`` has none: every lock request fails with "Internal
    error", Iceberg retries it without end, and the server hung at its first
    migration printing nothing. One ``show_locks`` call finds out."""
    jvm = spark.sparkContext._jvm
    hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark.sparkContext._jsc.hadoopConfiguration(),
        jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf"))
    try:
        client = jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(hive_conf)
    except Exception as e:  # py4j error: say which service
        raise MigrationError(f"cannot connect to the Hive metastore service {uris}: {jvm_errors.message(e)}") from e
    try:
        client.showLocks(jvm.org.apache.hadoop.hive.metastore.api.ShowLocksRequest())
    except Exception as e:  # py4j error: say what is missing and how to make it
        raise MigrationError(
            f"the Hive metastore service {uris} cannot take locks (show_locks: {jvm_errors.message(e)}); "
            "Iceberg's commits through a shared metastore need Hive's transaction tables (HIVE_LOCKS, "
            "NEXT_LOCK_ID, TXNS …). Create its schema with Hive's schematool (`schematool -dbType <db> "
            "-initSchema`, or `-upgradeSchema`), not DataNucleus' auto-create, and start tierlake again") from e
    finally:
        client.close()
    log.info("the Hive metastore service %s takes locks", uris)


def _connect(spark: Any, db: MetastoreDb) -> Any:
    jvm = spark.sparkContext._jvm
    if db.user is None and db.password is None:
        return jvm.java.sql.DriverManager.getConnection(db.url)
    return jvm.java.sql.DriverManager.getConnection(db.url, db.user or "", db.password or "")


def _ensure_postgres(spark: Any, db: MetastoreDb) -> None:
    statements = sql.split_statements(sql.read(POSTGRES_LOCK_TABLES))
    try:
        conn = _connect(spark, db)
    except Exception as e:  # py4j error: say which database, not a Java stack
        raise MigrationError(
            f"cannot connect to the metastore database {db.display_url}: {jvm_errors.message(e)}") from e
    try:
        conn.setAutoCommit(False)
        stmt = conn.createStatement()
        # One transaction (PostgreSQL's DDL is transactional): the set
        # appears whole or not at all; the script's advisory lock makes
        # processes starting together wait for each other.
        for statement in statements:
            stmt.execute(statement)
        conn.commit()
        stmt.close()
    except Exception as e:
        conn.rollback()
        raise MigrationError(f"cannot create the Hive lock tables in {db.display_url}: {jvm_errors.message(e)}") from e
    finally:
        conn.close()
    log.info("Hive lock tables present in %s", db.display_url)


def _ensure_derby(spark: Any, db: MetastoreDb) -> None:
    """TxnDbUtil.prepDb, only when tables are missing.

    prepDb is not idempotent ("Table/View 'TXNS' already exists"). A
    half-created set (a crash during the very first start) is dropped and
    created again: nothing can have used it.
    """
    jvm = spark.sparkContext._jvm
    hconf = db.hive_conf(jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark.sparkContext._jsc.hadoopConfiguration(),
        jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf"),
    ))
    conn = _connect(spark, db)
    try:
        present = set()
        rs = conn.getMetaData().getTables(None, None, None, None)
        while rs.next():
            present.add(rs.getString("TABLE_NAME").upper())
        rs.close()
        existing = [t for t in LOCK_TABLES if t in present]
        if len(existing) == len(LOCK_TABLES):
            return
        stmt = conn.createStatement()
        for table in existing:
            log.warning("dropping half-created Hive lock table %s", table)
            stmt.execute(f'DROP TABLE "{table}"')
        stmt.close()
    finally:
        conn.close()
    try:
        jvm.org.apache.hadoop.hive.metastore.txn.TxnDbUtil.prepDb(hconf)
    except Exception as e:  # py4j error: surface as a startup failure
        raise MigrationError(f"cannot create the Hive lock tables: {e}") from e
    log.info("created the Hive metastore lock tables")
