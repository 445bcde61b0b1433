"""The tiering service: stream tables → lake tables, exactly once."""
