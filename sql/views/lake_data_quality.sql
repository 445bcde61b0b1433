-- Results of data-quality runs (sys.validate, and tiering rounds of tables
-- with table.datalake.quality = warn or block): one row per expectation per run.
CREATE OR REPLACE VIEW sys.lake_data_quality AS
SELECT
  CAST(database_name AS STRING)     AS database_name,
  CAST(table_name AS STRING)        AS table_name,
  CAST(run_id AS STRING)            AS run_id,
  CAST(run_time AS TIMESTAMP)       AS run_time,
  CAST(expectation AS STRING)       AS expectation,
  CAST(success AS BOOLEAN)          AS success,
  CAST(observed_value AS STRING)    AS observed_value,
  CAST(unexpected_count AS BIGINT)  AS unexpected_count,
  CAST(unexpected_sample AS STRING) AS unexpected_sample
FROM sys.quality_results
