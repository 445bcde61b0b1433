-- When each table's managed maintenance last ran (what the history still
-- holds): a restarted server continues the schedule instead of starting it over.
SELECT table_id, unix_millis(max(started_at)) AS last_ms
FROM sys.lake_maintenance_log
GROUP BY table_id
