-- The user expectations of each table (sys.add_expectation / sys.drop_expectation).
CREATE OR REPLACE VIEW sys.data_quality_expectations AS
SELECT database_name, table_name, expectation, kwargs, created_at, created_by
FROM sys.quality_expectations
