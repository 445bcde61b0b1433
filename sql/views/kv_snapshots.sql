-- Retained KV snapshots of primary-key stream tables; leased = an unexpired
-- lease protects it from retention.
CREATE OR REPLACE VIEW sys.kv_snapshots AS
SELECT c.database_name, c.table_name, c.snapshot_id, c.log_position, c.created_at,
       coalesce(l.leased, false) AS leased
FROM sys.kv_snapshot_catalog c
LEFT JOIN (
  SELECT DISTINCT database_name, table_name, snapshot_id, true AS leased
  FROM sys.kv_snapshot_lease_state
  WHERE expires_at > current_timestamp()
) l ON l.database_name = c.database_name AND l.table_name = c.table_name AND l.snapshot_id = c.snapshot_id
