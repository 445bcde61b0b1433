"""Request ids outliving their stream snapshots (docs/ingest.md).

A committed write's ``tierlake.write.request-id`` is in the summary of the
stream snapshot that committed it. Managed maintenance keeps few stream
snapshots (``table.datalake.stream.max-snapshots``), so before it expires
any it writes their request ids to ``sys.write_requests`` (the ledger):
:func:`record_expiring` is the expiry's ``before_commit``, and a failure
there keeps every snapshot. The table's committer
(``ingest/java/StreamIngest.java``) reads the ledger when it starts and
whenever snapshots it never saw are gone; the housekeeping deletes rows
older than ``tierlake.write.request-id-retention``.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from tierlake.server.config.settings import duration_default
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.state.state_table import SmallTable

LEDGER = "sys.write_requests"
RETENTION = "tierlake.write.request-id-retention"


def retention(config: Any = None) -> timedelta:
    if config is None:
        return duration_default(RETENTION)
    return config.duration(RETENTION)


def record_expiring(spark: Any, table: Any, removed: Any, keep_for: timedelta) -> int:
    """Append the request ids of ``removed`` (snapshots of ``table`` about to be
    expired) committed within ``keep_for`` to the ledger; returns how many.
    Idempotent: a retry after an unknown outcome appends nothing twice."""
    since_ms = int(time.time() * 1000 - keep_for.total_seconds() * 1000)
    rows = json.loads(str(jclass(STREAM_INGEST, spark.sparkContext._jvm).requestIdsOf(removed, since_ms)))
    if not rows:
        return 0
    uuid = str(table.uuid())
    for row in rows:
        row["table_uuid"] = uuid
        row["committed_at"] = _timestamp(row["committed_at"])
    digest = hashlib.sha256("\n".join(sorted(str(r["snapshot_id"]) for r in rows)).encode()).hexdigest()[:32]
    SmallTable(spark, LEDGER).append(rows, token=f"{uuid}:{digest}")
    return len(rows)


def _timestamp(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, timezone.utc)


def configure(spark: Any, config: Any) -> None:
    """Point the process's committers at the ledger (the server's start, after the migrations)."""
    jclass(STREAM_INGEST, spark.sparkContext._jvm).configureLedger(
        iceberg_table(spark, LEDGER), int(retention(config).total_seconds() * 1000))
