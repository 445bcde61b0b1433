-- Atomic CREATE TABLE ... AS SELECT statements of tiered tables and how they
-- ended: committed, aborted (query failed or cancelled) or rolled_back (found
-- unfinished at server start before its commit point), recovered (found
-- unfinished after it, and finished); running ones are in progress, phase
-- says how far (staged, written, renamed).
CREATE OR REPLACE VIEW sys.create_table_as_log AS
SELECT ctas_id, database_name, table_name, lake_database, lake_table, state, phase, user_name,
       started_at, finished_at, detail
FROM sys.ctas_journal
