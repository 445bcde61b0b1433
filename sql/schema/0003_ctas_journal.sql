-- The journal of atomic CREATE TABLE ... AS SELECT of tiered tables: one row
-- per statement, written before anything is staged, so that a server killed
-- mid-way can roll the statement back at its next start.

CREATE TABLE IF NOT EXISTS sys.ctas_journal (
  ctas_id          STRING    COMMENT 'id of the statement (names its staged tables and locations)',
  database_name    STRING    COMMENT 'stream table database',
  table_name       STRING    COMMENT 'stream table name',
  lake_database    STRING    COMMENT 'lake table database',
  lake_table       STRING    COMMENT 'lake table name',
  staged_stream    STRING    COMMENT 'staged stream table (in sys) until commit',
  staged_lake      STRING    COMMENT 'staged lake table (in sys) until commit',
  stream_location  STRING    COMMENT 'location of the stream table (unique to this statement)',
  lake_location    STRING    COMMENT 'location of the lake table (unique to this statement)',
  created_database STRING    COMMENT 'lake database this statement created, dropped again on rollback if empty',
  state            STRING    COMMENT 'running, committed, aborted, rolled_back, recovered',
  user_name        STRING    COMMENT 'who ran it',
  started_at       TIMESTAMP,
  finished_at      TIMESTAMP,
  detail           STRING    COMMENT 'why it was aborted or rolled back'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');
