"""Tiered tables in the catalog: table paths, tiering properties, creating stream and lake tables."""
