"""Process bootstrap: settings and configuration, the SparkSession (session.py merges
what each feature's ``JvmFeature`` adds to it), jars and the one jar of tierlake's JVM
classes (javaext.py compiles every ``server/<package>/java/``; runtime's own java/: Spark's
parser helpers, the internal Thrift Server's authenticator, ``file:`` without forks),
py4j helpers, logging, fault points, durations, periodic threads, statement
cancellation, and the Iceberg actions (iceberg_actions.py) the layers above build
maintenance from."""
