-- A tiering job's heartbeat: insert it on first sight, else renew and count rounds.
MERGE INTO sys.tiering_jobs t
USING (
  SELECT :job AS job_id, CAST(:now AS TIMESTAMP) AS now,
         CAST(:finished AS BIGINT) AS finished, CAST(:failed AS BIGINT) AS failed
) s
ON t.job_id = s.job_id
WHEN MATCHED THEN UPDATE SET
  last_heartbeat  = s.now,
  rounds_finished = t.rounds_finished + s.finished,
  rounds_failed   = t.rounds_failed + s.failed
WHEN NOT MATCHED THEN INSERT (job_id, first_seen, last_heartbeat, rounds_finished, rounds_failed)
  VALUES (s.job_id, s.now, s.now, s.finished, s.failed)
