-- The coordinator's state: every table here is Iceberg, changed only by
-- procedures (one Iceberg commit per change). Idempotent: safe to re-run.

CREATE DATABASE IF NOT EXISTS sys
COMMENT 'tierlake coordinator state and status views';

CREATE TABLE IF NOT EXISTS sys.schema_version (
  version     INT       COMMENT 'migration number (NNNN of sql/schema/NNNN_*.sql)',
  name        STRING    COMMENT 'migration file name',
  checksum    STRING    COMMENT 'sha256 of the migration file when applied',
  applied_at  TIMESTAMP COMMENT 'when it was applied'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');

-- One row per registered (tiered) table and its tiering state.
CREATE TABLE IF NOT EXISTS sys.tiering_tables (
  table_id          BIGINT    COMMENT 'stable id of the registered table',
  database_name     STRING    COMMENT 'stream table database',
  table_name        STRING    COMMENT 'stream table name',
  lake_database     STRING    COMMENT 'lake table database',
  lake_table        STRING    COMMENT 'lake table name',
  status            STRING    COMMENT 'New, Initialized, Scheduled, Pending, Tiering, Tiered, Failed',
  tiering_epoch     BIGINT    COMMENT 'incremented on every entry into Pending',
  job_id            STRING    COMMENT 'tiering job currently assigned',
  last_heartbeat    TIMESTAMP COMMENT 'last heartbeat of the assigned job for this table',
  last_tiered_time  TIMESTAMP COMMENT 'end of the last successful round',
  tiered_position   BIGINT    COMMENT 'stream log position tiered into the lake',
  last_error        STRING    COMMENT 'last error (truncated to 2048 characters)',
  last_error_time   TIMESTAMP COMMENT 'time of last_error',
  failure_count     INT       COMMENT 'consecutive failed rounds',
  properties        MAP<STRING, STRING> COMMENT 'tiering properties of the table',
  created_at        TIMESTAMP COMMENT 'registration time',
  updated_at        TIMESTAMP COMMENT 'time of the last state change',
  pending_since     TIMESTAMP COMMENT 'when it last entered Pending (most overdue is assigned first)',
  round_started     TIMESTAMP COMMENT 'start of the current round',
  next_due          TIMESTAMP COMMENT 'Scheduled: when freshness is due; Failed: end of the retry back-off'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');

-- The registered procedures, rewritten at every start from the registry.
CREATE TABLE IF NOT EXISTS sys.procedure_catalog (
  name         STRING  COMMENT 'sys.<name>',
  signature    STRING  COMMENT 'parameters with SQL types and defaults',
  returns      STRING  COMMENT 'result columns',
  description  STRING  COMMENT 'one-line description',
  read_only    BOOLEAN COMMENT 'true when the procedure changes nothing'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');
