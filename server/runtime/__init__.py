"""Process bootstrap: settings and configuration, the SparkSession, jars and tierlake's
JVM classes (java/, compiled by javaext.py), py4j helpers, the metastore, logging, fault
points, durations, periodic threads, resource bounds, statement cancellation, and the
Iceberg actions (iceberg_actions.py) the layers above build maintenance from."""
