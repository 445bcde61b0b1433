"""Bootstrap and process runtime: configuration, the SparkSession, jars, metastore, migrations, logging, fault points."""
