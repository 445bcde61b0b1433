"""Writes into stream tables (docs/ingest.md): Spark analyses each INSERT in
the client's own session, tierlake checks its rows and commits it through
the table's one committer (group commit, request ids)."""
