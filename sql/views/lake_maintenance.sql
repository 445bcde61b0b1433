-- One row per maintenance action of a lake or stream table.
CREATE OR REPLACE VIEW sys.lake_maintenance AS
SELECT database_name, table_name, table_id, target, kind, run_trigger, started_at, duration_ms,
       snapshots_expired, files_rewritten, delete_files_rewritten, files_added, orphans_removed,
       detail, error, run_id, tiering_epoch, job_id
FROM sys.lake_maintenance_log
