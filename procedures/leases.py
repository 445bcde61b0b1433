"""KV snapshot leases (docs/design.md, 'Leases'): keep KV snapshots from retention while someone reads them."""

from __future__ import annotations

from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.config.durations import parse_duration
from tierlake.server.kv import snapshot_catalog as kv
from tierlake.server.kv.leases import DEFAULT_DURATION, NOT_FOUND, RESULT_COLUMNS, Leases
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import TIERING


@registry.procedure(returns=RESULT_COLUMNS, role=TIERING)
def acquire_lease(ctx: Context, lease_id: str, table: str, snapshots: dict[int, int | None] | None = None,
                  duration: str = DEFAULT_DURATION):
    """Lease KV snapshots of a primary-key table's buckets; renews every entry of the lease.

    One row per bucket: status acquired (with the lease's new expiry) or
    unavailable (the snapshot is not retained any more, e.g. already expired).
    A leased snapshot survives sys.expire_kv_snapshots, the automatic
    retention and, through an Iceberg tag on the KV table, an external
    expire_snapshots, until the lease is released or expires.

    Args:
      lease_id: the lease (a tiering job uses its persistent job id)
      table: the primary-key stream table, db.table
      snapshots: bucket to KV snapshot id, e.g. map(0, 123L, 1, 124L); a NULL id or a NULL map
          means the newest KV snapshot (for every bucket)
      duration: how long the whole lease lasts from now, e.g. '6 h'
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    return Leases(ctx.spark).acquire(lease_id, path, snapshots, parse_duration(duration, "duration"), kv.utcnow())


@registry.procedure(returns=RESULT_COLUMNS, role=TIERING)
def release_lease(ctx: Context, lease_id: str, table: str, buckets: list[int] | None = None):
    """Release a lease's entries for one table (all buckets, or the listed ones).

    Returns the released entries (status released). Their snapshots fall back
    to the normal retention.

    Args:
      lease_id: the lease
      table: the primary-key stream table, db.table
      buckets: only these buckets; NULL for all
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    return Leases(ctx.spark).release(lease_id, path, buckets)


@registry.procedure(returns=RESULT_COLUMNS, role=TIERING)
def drop_lease(ctx: Context, lease_id: str):
    """Drop a lease with all its entries, on every table.

    A lease with no entries (unknown, already dropped or expired) answers one
    row with status not found, saying so: nothing was dropped.

    Args:
      lease_id: the lease
    """
    released = Leases(ctx.spark).release(lease_id, None)
    if released:
        return released
    return [(None, None, None, NOT_FOUND, None,
             f"no lease {lease_id!r} holds any KV snapshot: nothing was dropped (sys.kv_snapshot_leases lists "
             "the leases)")]
