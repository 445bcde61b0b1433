-- How far each tiered table's lake is behind its stream: what a dashboard
-- alerts on. lag_seconds = now - commit time of the oldest stream commit not
-- yet in the lake (0 when caught up); pending rows/bytes after the tiered
-- position. Uses current_timestamp(), so every read is evaluated by Spark.
CREATE OR REPLACE VIEW sys.lake_tiering_lag AS
WITH tables AS (
  SELECT table_id, database_name, table_name, tiered_position,
         coalesce(properties['table.datalake.freshness'], '1 min') AS freshness
  FROM sys.tiering_tables
),
durations AS (
  SELECT *,
         CAST(regexp_extract(freshness, '^\\s*([0-9]+(\\.[0-9]+)?)', 1) AS DOUBLE) AS amount,
         lower(regexp_extract(freshness, '^\\s*[0-9.]+\\s*([a-zA-Z]*)\\s*$', 1)) AS unit
  FROM tables
),
pending AS (
  SELECT t.table_id,
         min(b.committed_at) AS oldest_pending,
         sum(b.record_count) AS pending_rows,
         sum(b.file_bytes)   AS pending_bytes
  FROM tables t
  JOIN sys.tiering_backlog b
    ON b.table_id = t.table_id AND b.log_position > coalesce(t.tiered_position, 0)
  GROUP BY t.table_id
),
lag AS (
  SELECT d.database_name, d.table_name, d.freshness,
         CAST(d.amount * CASE
           WHEN d.unit = '' THEN 0.001
           WHEN d.unit IN ('ms', 'milli', 'millis', 'millisecond', 'milliseconds') THEN 0.001
           WHEN d.unit IN ('s', 'sec', 'secs', 'second', 'seconds') THEN 1
           WHEN d.unit IN ('m', 'min', 'mins', 'minute', 'minutes') THEN 60
           WHEN d.unit IN ('h', 'hour', 'hours') THEN 3600
           WHEN d.unit IN ('d', 'day', 'days') THEN 86400
         END AS BIGINT) AS freshness_seconds,
         CASE WHEN p.oldest_pending IS NULL THEN CAST(0 AS BIGINT)
              ELSE greatest(CAST(0 AS BIGINT),
                            unix_timestamp(current_timestamp()) - unix_timestamp(p.oldest_pending))
         END AS lag_seconds,
         coalesce(p.pending_rows, CAST(0 AS BIGINT))  AS pending_rows,
         coalesce(p.pending_bytes, CAST(0 AS BIGINT)) AS pending_bytes
  FROM durations d
  LEFT JOIN pending p ON p.table_id = d.table_id
)
SELECT
  CAST(database_name AS STRING)     AS database_name,
  CAST(table_name AS STRING)        AS table_name,
  CAST(freshness AS STRING)         AS freshness,
  CAST(freshness_seconds AS BIGINT) AS freshness_seconds,
  CAST(lag_seconds AS BIGINT)       AS lag_seconds,
  coalesce(lag_seconds > freshness_seconds, false) AS overdue,
  CAST(pending_rows AS BIGINT)      AS pending_rows,
  CAST(pending_bytes AS BIGINT)     AS pending_bytes
FROM lag
