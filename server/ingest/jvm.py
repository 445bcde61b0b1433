"""The stream-write path's JVM half: java/StreamIngest.java stages and commits
INSERTs into stream tables (values written without a Spark job, one committer
per table, group commit, request ids). It adds nothing to Spark's settings."""

STREAM_INGEST = "io.tierlake.internal.StreamIngest"
