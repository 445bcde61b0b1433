"""What the metastore adds to the Spark the server runs (``FEATURE``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlake.server.config.config import Config
from tierlake.server.metastore.database import MetastoreDb, check_remote_locks, ensure_lock_tables, metastore_db
from tierlake.server.runtime.javaext import JvmFeature
from tierlake.server.runtime.session import LOCKING_CATALOG

SESSION_VIEWS = "io.tierlake.internal.SessionViews"
CAS_ALTER_HANDLER = "io.tierlake.internal.CasAlterHandler"
CACHING_OBJECT_STORE = "io.tierlake.internal.CachingObjectStore"
TXN_HANDLER = "org.apache.hadoop.hive.metastore.txn.TierlakeTxnHandler"


def embedded_metastore(db: MetastoreDb, user_conf: Mapping[str, str]) -> bool:
    """The metastore's code runs in this JVM and nowhere else: embedded Derby,
    and no remote metastore service named (``hive.metastore.uris``)."""
    uris = user_conf.get("spark.hadoop.hive.metastore.uris") or user_conf.get("hive.metastore.uris")
    return not db.shared and not (uris or "").strip()


def spark_settings(config: Config, user: Mapping[str, str]) -> dict[str, str]:
    """The session catalog over the metastore, the database's connection and,
    for an embedded metastore, tierlake's code inside it."""
    settings = {
        # Iceberg's SparkSessionCatalog, whose view replace also replaces the metastore's view text
        # (SessionViews.java: Spark resolves a session-catalog view by that text).
        "spark.sql.catalog.spark_catalog": SESSION_VIEWS,
        "spark.sql.catalog.spark_catalog.type": "hive",
        # Every JDBC session of the Thrift Server has its own catalog
        # instance; with Iceberg's table cache on, a commit made in one
        # session stays invisible to the others for up to 30 s.
        "spark.sql.catalog.spark_catalog.cache-enabled": "false",
    }
    db = metastore_db(config)
    settings.update(db.spark_settings())
    if embedded_metastore(db, user):
        # Embedded Derby: every metastore call runs in this JVM, where
        # CasAlterHandler.java makes an Iceberg commit's alter_table a
        # compare-and-set on metadata_location; Iceberg then skips the metastore
        # locks, whose statements Derby compiled anew each time (a third of a
        # commit's CPU), and CachingObjectStore.java answers getTable from
        # memory while the row is unchanged. A shared PostgreSQL metastore, or a
        # remote metastore service (hive.metastore.uris), runs none of this code
        # where the commits land: Iceberg keeps its locks there.
        settings["spark.hadoop.hive.metastore.alter.impl"] = CAS_ALTER_HANDLER
        settings["spark.hadoop.hive.metastore.rawstore.impl"] = CACHING_OBJECT_STORE
        settings["spark.hadoop.hive.metastore.txn.store.impl"] = TXN_HANDLER
        settings["spark.hadoop.iceberg.engine.hive.lock-enabled"] = "false"
        # The same catalog with Iceberg's metastore locks, for this process's
        # maintenance commits to stream tables (iceberg_table(locking=True)): a lock
        # request makes the table's committers hold back until the commit lands
        # (TierlakeTxnHandler.java); without it a stream compaction under steady
        # ingest lost every retry to the group commits (110 s, then failed).
        settings[f"spark.sql.catalog.{LOCKING_CATALOG}"] = "org.apache.iceberg.spark.SparkCatalog"
        settings[f"spark.sql.catalog.{LOCKING_CATALOG}.type"] = "hive"
        settings[f"spark.sql.catalog.{LOCKING_CATALOG}.cache-enabled"] = "false"
        settings[f"spark.sql.catalog.{LOCKING_CATALOG}.hadoop.iceberg.engine.hive.lock-enabled"] = "true"
    return settings


def started(spark: Any, config: Config, owns_metastore: bool) -> None:
    """The lock tables Iceberg's commits need, and a remote service's locks checked."""
    db = metastore_db(config)
    # A shared database is prepared by whichever process comes first
    # (idempotent, under a lock); embedded Derby only by its owner.
    if owns_metastore or db.shared:
        ensure_lock_tables(spark, db)
    uris = config.values.get("spark.hadoop.hive.metastore.uris") or config.values.get("hive.metastore.uris")
    if (uris or "").strip():
        check_remote_locks(spark, uris.strip())


FEATURE = JvmFeature("metastore", settings=spark_settings, classpath=lambda config: list(metastore_db(config).jars),
                     started=started)
