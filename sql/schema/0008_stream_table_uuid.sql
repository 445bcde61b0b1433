-- The Iceberg table UUID of each registered stream table, recorded at
-- registration and checked when a round is planned: a stream table dropped
-- and created again under its name has another UUID (docs/tiering.md,
-- "Guards"). NULL for tables registered before this migration (not checked
-- until registered again; their lake tables record the UUID with every round).
-- Spark 3.5 has no ADD COLUMNS IF NOT EXISTS: the migration runner treats
-- FIELDS_ALREADY_EXISTS as done, so a re-run stays harmless.

ALTER TABLE sys.tiering_tables ADD COLUMNS (
  stream_uuid      STRING    COMMENT 'Iceberg table UUID of the stream table when it was registered'
)
