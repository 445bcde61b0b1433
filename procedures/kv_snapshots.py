"""KV snapshots of primary-key stream tables and log retention (docs/design.md, 'KV snapshots')."""

from __future__ import annotations

from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.kv import log_retention as logretention
from tierlake.server.kv import retention, snapshot_catalog
from tierlake.server.kv import snapshots as kv
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import ADMIN

SNAPSHOT_COLUMNS = [("table_path", "string"), ("snapshot_id", "bigint"), ("log_position", "bigint"),
                    ("created_at", "timestamp"), ("created", "boolean")]


@registry.procedure(returns=SNAPSHOT_COLUMNS, role=ADMIN)
def kv_snapshot(ctx: Context, table: str):
    """Take a KV snapshot of a primary-key stream table now: its key→row state at the current log position.

    The snapshot is a snapshot of the table's companion KV table (sys.kv_*);
    its id is that Iceberg snapshot id, shared by all buckets. Only the
    changelog since the previous snapshot is applied. When nothing was written
    since, the newest snapshot is returned (created = false). Retention
    (kv.snapshot.num-retained) is applied afterwards, as after a periodic snapshot.

    Args:
      table: the primary-key stream table, db.table
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    snap, created = kv.take_snapshot(ctx.spark, path)
    if created:
        props = snapshot_catalog.properties(ctx.spark, path)
        retention.expire(ctx.spark, path, retention.num_retained(props, ctx.config))
    return [(str(path), snap.snapshot_id, snap.log_position, snap.created_at, created)]


@registry.procedure(returns=[("table_path", "string"), ("snapshot_id", "bigint"), ("log_position", "bigint"),
                             ("outcome", "string")], role=ADMIN)
def expire_kv_snapshots(ctx: Context, table: str, retain: int | None = None):
    """Expire a table's KV snapshots except the newest ones and those under an unexpired lease.

    Returns every snapshot that was retained with its outcome: retained (among
    the newest), leased (kept for a lease) or expired (removed, with its
    Iceberg snapshot). Expired leases of the table are removed as well.

    Args:
      table: the primary-key stream table, db.table
      retain: how many of the newest snapshots to keep (at least 1); NULL means the table's kv.snapshot.num-retained
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    if retain is None:
        retain = retention.num_retained(snapshot_catalog.primary_key_spec(ctx.spark, path)[0], ctx.config)
    return [
        (str(path), s.snapshot_id, s.log_position, outcome) for s, outcome in retention.expire(ctx.spark, path, retain)
    ]


@registry.procedure(returns=logretention.RESULT_COLUMNS, role=ADMIN)
def apply_log_retention(ctx: Context, table: str):
    """Apply the stream table's log retention (table.log.ttl) now.

    Changelog data older than the TTL is removed only where it is both tiered
    into the lake and, for primary-key tables, covered by the newest (and every
    leased) KV snapshot. The removal is a tierlake maintenance commit that
    tiering skips. Without table.log.ttl nothing is removed.

    Args:
      table: the stream table, db.table
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    return [logretention.apply(ctx.spark, path).row()]
