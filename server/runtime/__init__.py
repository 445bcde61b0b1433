"""Bootstrap and process runtime: settings and configuration, the SparkSession, jars,
metastore, migrations, logging, fault points, statement cancellation, the UDF registry."""
