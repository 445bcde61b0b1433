SELECT version, name, checksum FROM sys.schema_version ORDER BY version
