-- Fluss's sys.lake_tiering_status: exactly these columns, in this order.
CREATE OR REPLACE VIEW sys.lake_tiering_status AS
SELECT
  CAST(database_name AS STRING)       AS database_name,
  CAST(table_name AS STRING)          AS table_name,
  CAST(status AS STRING)              AS status,
  CAST(tiering_epoch AS BIGINT)       AS tiering_epoch,
  CAST(last_tiered_time AS TIMESTAMP) AS last_tiered_time,
  CAST(last_error AS STRING)          AS last_error,
  CAST(last_error_time AS TIMESTAMP)  AS last_error_time
FROM sys.tiering_tables
