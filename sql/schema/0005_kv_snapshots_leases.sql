-- KV snapshots of primary-key stream tables and the leases that keep them.
-- A KV snapshot is one Iceberg snapshot of the table's companion KV table
-- (sys.kv_*); this catalog lists the retained ones, across tables, for the
-- sys.kv_snapshots view. Idempotent: safe to re-run.

CREATE TABLE IF NOT EXISTS sys.kv_snapshot_catalog (
  database_name       STRING    COMMENT 'stream table database',
  table_name          STRING    COMMENT 'stream table name',
  kv_table            STRING    COMMENT 'companion KV table (sys.kv_*) holding the snapshot',
  snapshot_id         BIGINT    COMMENT 'KV snapshot id = Iceberg snapshot id of the KV table (shared by all buckets)',
  log_position        BIGINT    COMMENT 'stream log position (snapshot sequence number) the state is taken at',
  stream_snapshot_id  BIGINT    COMMENT 'stream table snapshot at that position',
  created_at          TIMESTAMP COMMENT 'when the snapshot was taken'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');

-- One row per (lease, table, bucket): the bucket's KV snapshot is protected
-- until expires_at (an Iceberg tag on the KV table protects it as well).
CREATE TABLE IF NOT EXISTS sys.kv_snapshot_lease_state (
  lease_id       STRING    COMMENT 'lease id (a tiering job uses its persistent job id)',
  database_name  STRING    COMMENT 'stream table database',
  table_name     STRING    COMMENT 'stream table name',
  kv_table       STRING    COMMENT 'companion KV table carrying the lease tag',
  bucket         INT       COMMENT 'bucket of the stream table (bucket(N, first key column))',
  snapshot_id    BIGINT    COMMENT 'leased KV snapshot',
  acquired_at    TIMESTAMP COMMENT 'first acquired',
  expires_at     TIMESTAMP COMMENT 'end of the lease; every acquire by the lease renews it'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');
