-- Data quality (DESIGN §9): user expectations per table, and the results of
-- every validation run, one row per expectation.

CREATE TABLE IF NOT EXISTS sys.quality_expectations (
  database_name STRING    COMMENT 'stream table database',
  table_name    STRING    COMMENT 'stream table name',
  expectation   STRING    COMMENT 'Great Expectations expectation type, snake_case (expect_column_values_to_be_between)',
  kwargs        STRING    COMMENT 'its arguments as a JSON object (keys sorted)',
  created_at    TIMESTAMP COMMENT 'when it was added',
  created_by    STRING    COMMENT 'who added it'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');

CREATE TABLE IF NOT EXISTS sys.quality_results (
  run_id            STRING    COMMENT 'one validation run of one table',
  table_id          BIGINT    COMMENT 'coordinator id of the table',
  database_name     STRING    COMMENT 'stream table database',
  table_name        STRING    COMMENT 'stream table name',
  lake_table        STRING    COMMENT 'the lake table validated (db.table)',
  lake_ref          STRING    COMMENT 'main, or the tiering branch validated before publishing',
  lake_snapshot_id  BIGINT    COMMENT 'lake snapshot validated',
  tiered_position   BIGINT    COMMENT 'stream log position the lake state was checked against',
  run_trigger       STRING    COMMENT 'validate (sys.validate), warn or block (after/before a tiering round publishes)',
  tiering_epoch     BIGINT    COMMENT 'epoch of the tiering round (warn, block)',
  run_time          TIMESTAMP COMMENT 'when the run started',
  source            STRING    COMMENT 'derived (key, row-count, position checks) or user (sys.add_expectation)',
  expectation       STRING    COMMENT 'expectation type with its arguments',
  success           BOOLEAN,
  observed_value    STRING    COMMENT 'what was measured (JSON), or the error of an expectation that could not run',
  unexpected_count  BIGINT    COMMENT 'rows that failed a row-level expectation',
  unexpected_sample STRING    COMMENT 'JSON sample of failing rows: their keys (and value) for primary-key tables'
) USING iceberg
PARTITIONED BY (days(run_time))
TBLPROPERTIES ('format-version' = '2');
