-- For a state table from before the coordinator kept its id counter (coordinator.py):
-- the highest table id used so far, registered now or seen in the round history.
SELECT greatest(
  coalesce((SELECT max(table_id) FROM sys.tiering_tables), 0),
  coalesce((SELECT max(table_id) FROM sys.tiering_round_log), 0)
) AS max_id
