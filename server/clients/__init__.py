"""Clients of a tierlake server: JDBC connections, the procedure client, table formatting."""
