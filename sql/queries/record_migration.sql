INSERT INTO sys.schema_version
VALUES (:version, :name, :checksum, current_timestamp())
