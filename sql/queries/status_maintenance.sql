-- The status page's maintenance runs of one table, newest first (named parameters :database, :table).
SELECT started_at, target, kind, run_trigger, duration_ms, files_rewritten, snapshots_expired,
       orphans_removed, detail, error
FROM sys.lake_maintenance
WHERE database_name = :database AND table_name = :table
ORDER BY started_at DESC
LIMIT 20
