-- KV snapshot leases: active until expires_at, then expired (they no longer
-- protect their snapshot and are removed by the next cleanup).
CREATE OR REPLACE VIEW sys.kv_snapshot_leases AS
SELECT lease_id, database_name, table_name, bucket, snapshot_id, acquired_at, expires_at,
       CASE WHEN expires_at > current_timestamp() THEN 'active' ELSE 'expired' END AS state
FROM sys.kv_snapshot_lease_state
