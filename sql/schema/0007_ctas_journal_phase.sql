-- The phase an atomic CREATE TABLE ... AS SELECT reached, and the stream
-- position its staged lake table covers (journaled before either table is
-- renamed into place), so that recovery at start can finish a statement
-- whose tables users could already see instead of rolling it back.
-- Spark 3.5 has no ADD COLUMNS IF NOT EXISTS: the migration runner treats
-- FIELDS_ALREADY_EXISTS as done, so a re-run stays harmless.

ALTER TABLE sys.ctas_journal ADD COLUMNS (
  phase            STRING    COMMENT 'staged, written (query written and tiered, position journaled), renamed (both tables in place)',
  tiered_position  BIGINT    COMMENT 'stream position the staged lake table covers; registered as tiered at commit'
)
