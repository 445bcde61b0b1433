-- Request ids whose stream snapshots were expired (docs/ingest.md): managed
-- maintenance writes the ids of the stream snapshots it is about to expire
-- here first, so a retried write is still recognised after its snapshot is
-- gone, and stream snapshots can be kept few at any write rate. Rows older
-- than tierlake.write.request-id-retention are deleted by the housekeeping.
-- Idempotent.

CREATE TABLE IF NOT EXISTS sys.write_requests (
  table_uuid    STRING    COMMENT 'Iceberg table UUID of the stream table the write committed to',
  request_id    STRING    COMMENT 'tierlake.write.request-id of the write',
  snapshot_id   BIGINT    COMMENT 'the stream snapshot that committed it (expired since)',
  committed_at  TIMESTAMP COMMENT 'commit time of that snapshot'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');
