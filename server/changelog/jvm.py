"""The changelog's JVM half and what it adds to Spark (``FEATURE``).

- java/LakeFiles.java copies a log table's appended data files into the lake
  and lists a primary-key chunk's data files (file_copy.py, lake_write.py);
- java/IncrementalCatalog.java is the read-only catalog ``tierlake_inc``: a
  stream table read after a snapshot, the stream part of a fresh view;
- java/FreshMerge.java (an optimizer rule) merges a fresh view's few pending
  changes while the query is planned, with java/FreshEntries.java and
  java/KeySet.java (its readers and pending-key probe, also run in tasks).
"""

from __future__ import annotations

from collections.abc import Mapping

from tierlake.server.config.config import Config
from tierlake.server.runtime.javaext import JvmFeature

LAKE_FILES = "io.tierlake.internal.LakeFiles"
INCREMENTAL_CATALOG = "io.tierlake.internal.IncrementalCatalog"
FRESH_MERGE = "io.tierlake.internal.FreshMerge"
FRESH_LOCAL_ROWS_CONF = "spark.tierlake.fresh.local-merge-rows"  # FreshMerge.LOCAL_ROWS_CONF
INCREMENTAL_CATALOG_NAME = "tierlake_inc"  # spark.sql.catalog.<this>


def spark_settings(config: Config, user: Mapping[str, str]) -> dict[str, str]:
    return {
        FRESH_LOCAL_ROWS_CONF: str(config.int("tierlake.fresh.local-merge-rows")),
        # Fresh views read a stream table after a snapshot through this
        # read-only catalog (Spark 3.5 SQL cannot name a read option).
        f"spark.sql.catalog.{INCREMENTAL_CATALOG_NAME}": INCREMENTAL_CATALOG,
    }


# FreshMerge: a fresh view's few pending changes merged while the query is planned.
FEATURE = JvmFeature("fresh views", settings=spark_settings, extensions=(FRESH_MERGE,))
