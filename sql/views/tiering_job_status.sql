-- Tiering jobs with the tables each is tiering now.
CREATE OR REPLACE VIEW sys.tiering_job_status AS
SELECT j.job_id, j.first_seen, j.last_heartbeat, j.rounds_finished, j.rounds_failed,
       coalesce(sort_array(collect_list(concat(t.database_name, '.', t.table_name))), array()) AS tiering_tables
FROM sys.tiering_jobs j
LEFT JOIN sys.tiering_tables t ON t.job_id = j.job_id AND t.status = 'Tiering'
GROUP BY j.job_id, j.first_seen, j.last_heartbeat, j.rounds_finished, j.rounds_failed
