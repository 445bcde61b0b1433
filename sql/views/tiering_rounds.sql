-- One row per tiering round.
CREATE OR REPLACE VIEW sys.tiering_rounds AS
SELECT database_name, table_name, table_id, tiering_epoch, job_id,
       start_position, end_position, rows, bytes, files,
       started_at, ended_at, duration_ms, outcome, error
FROM sys.tiering_round_log
