"""The tierlake server: Spark session bootstrap, sys schema, coordinator, gateway and CLI."""
