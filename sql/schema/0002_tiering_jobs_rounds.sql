-- Tiering jobs and the history of rounds.

CREATE TABLE IF NOT EXISTS sys.tiering_jobs (
  job_id          STRING    COMMENT 'persistent id of a tiering job (also its lease id)',
  first_seen      TIMESTAMP COMMENT 'first heartbeat',
  last_heartbeat  TIMESTAMP COMMENT 'last heartbeat (persisted at most every timeout/4)',
  rounds_finished BIGINT    COMMENT 'rounds this job finished',
  rounds_failed   BIGINT    COMMENT 'rounds this job failed or abandoned'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');

CREATE TABLE IF NOT EXISTS sys.tiering_round_log (
  table_id        BIGINT,
  database_name   STRING,
  table_name      STRING,
  tiering_epoch   BIGINT,
  job_id          STRING,
  started_at      TIMESTAMP,
  ended_at        TIMESTAMP,
  duration_ms     BIGINT,
  start_position  BIGINT    COMMENT 'stream log position before the round',
  end_position    BIGINT    COMMENT 'stream log position tiered by the round',
  rows            BIGINT,
  bytes           BIGINT,
  files           BIGINT,
  outcome         STRING    COMMENT 'finished, force_finished, failed, timed_out, abandoned',
  error           STRING
) USING iceberg
PARTITIONED BY (days(ended_at))
TBLPROPERTIES ('format-version' = '2');
