-- The status page's data-quality results of one table, newest first (named parameters :database, :table).
SELECT run_time, expectation, success, observed_value, unexpected_count, unexpected_sample
FROM sys.lake_data_quality
WHERE database_name = :database AND table_name = :table
ORDER BY run_time DESC, expectation
LIMIT 40
