-- The stream commits of each tiered table that the lake may not have yet:
-- one row per append commit after the tiered position, as last probed
-- (server/tiering/backlog.py). sys.lake_tiering_lag filters it by the
-- coordinator's tiered position, so a round that commits is reflected at
-- once; new stream commits appear at the next probe. Idempotent.

CREATE TABLE IF NOT EXISTS sys.tiering_backlog (
  table_id         BIGINT    COMMENT 'registered table (sys.tiering_tables.table_id)',
  log_position     BIGINT    COMMENT 'stream commit = Iceberg snapshot sequence number',
  committed_at     TIMESTAMP COMMENT 'commit time of that stream snapshot',
  record_count     BIGINT    COMMENT 'rows the commit added (snapshot summary added-records)',
  file_bytes       BIGINT    COMMENT 'bytes the commit added (snapshot summary added-files-size)',
  probed_at        TIMESTAMP COMMENT 'when the probe saw the commit'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');
