-- The highest table id ever used (registered now or seen in the round history),
-- so that a re-registered table never gets the id of a dropped one.
SELECT greatest(
  coalesce((SELECT max(table_id) FROM sys.tiering_tables), 0),
  coalesce((SELECT max(table_id) FROM sys.tiering_round_log), 0)
) AS max_id
