-- Running for months (DESIGN §12). Every sys state table keeps a short
-- history: the server's housekeeping (server/runtime/housekeeping.py) sets
-- 'write.metadata.delete-after-commit.enabled' and a few previous metadata
-- versions on each of them at start (a migration may only add columns to
-- an existing table), and expires old snapshots. Idempotent.

-- One row per maintenance action of a lake or stream table (the
-- sys.lake_maintenance view): what ran, how long, what it did.
CREATE TABLE IF NOT EXISTS sys.lake_maintenance_log (
  run_id              STRING    COMMENT 'one maintenance run of one table (all its actions share it)',
  table_id            BIGINT    COMMENT 'coordinator id of the table',
  database_name       STRING    COMMENT 'stream table database',
  table_name          STRING    COMMENT 'stream table name',
  target              STRING    COMMENT 'the table the action changed (the lake or the stream table)',
  kind                STRING    COMMENT 'expire_snapshots, compaction, orphan_files, stream_expire_snapshots',
  run_trigger         STRING    COMMENT 'scheduled (after a round, every tierlake.maintenance.interval) or requested (sys.run_maintenance)',
  tiering_epoch       BIGINT    COMMENT 'the epoch of the assignment it ran in (no round of the table can run meanwhile)',
  job_id              STRING    COMMENT 'the tiering job that ran it',
  started_at          TIMESTAMP,
  duration_ms         BIGINT,
  snapshots_expired   BIGINT,
  files_rewritten     BIGINT    COMMENT 'data files replaced by compaction',
  delete_files_rewritten BIGINT COMMENT 'merge-on-read delete files removed by compaction',
  files_added         BIGINT    COMMENT 'data files compaction wrote',
  orphans_removed     BIGINT    COMMENT 'files no snapshot references, removed',
  detail              STRING    COMMENT 'what it did or why it skipped',
  error               STRING    COMMENT 'the error of a failed action (the others still ran)'
) USING iceberg
PARTITIONED BY (days(started_at))
TBLPROPERTIES ('format-version' = '2', 'write.metadata.delete-after-commit.enabled' = 'true',
               'write.metadata.previous-versions-max' = '5')
