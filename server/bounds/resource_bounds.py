"""What one statement may cost the server: time, result size, and a task's
memory failure staying that query's failure.

The Spark Thrift Server runs in the server's own driver JVM, and with a local
master so do the executors: without these bounds one reader's query could
hold a core forever, collect more than the heap into the driver, or (worst)
end the JVM. Spark's TaskRunner hands an ``OutOfMemoryError`` raised in a task
to ``SparkUncaughtExceptionHandler``, which calls ``System.exit``; a single
``SELECT repeat(s, 2000000000) FROM t`` ended every session
(``bounds/java/TaskErrorGuard.java`` keeps that to the query).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from tierlake.server.config.config import Config
from tierlake.server.config.durations import format_duration
from tierlake.server.runtime.javaext import JvmFeature
from tierlake.server.runtime.jvm import jclass

log = logging.getLogger("tierlake.session")

TASK_ERROR_GUARD = "io.tierlake.internal.TaskErrorGuard"
STATEMENT_DEADLINE = "io.tierlake.internal.StatementDeadline"
QUERY_TIMEOUT = "tierlake.query.timeout"
READER_TIMEOUT = "tierlake.query.reader-timeout"
MAX_RESULT_SIZE = "tierlake.query.max-result-size"
# Spark's own statement timeout fires this much after ours (StatementDeadline.java says why).
BACKSTOP_S = 10


def spark_settings(config: Config) -> dict[str, str]:
    """Spark settings of the bounds (a ``spark.*`` key the user sets wins over them)."""
    timeout = config.duration(QUERY_TIMEOUT).total_seconds()
    return {
        # Read by SparkExecuteStatementOperation only: statements relayed to
        # the Thrift Server, not the server's own jobs (tiering, ingest). It
        # ends a statement past its deadline outside any Spark job (planning);
        # StatementDeadline.java fails the jobs first, with a readable error.
        "spark.sql.thriftServer.queryTimeout": f"{math.ceil(timeout) + BACKSTOP_S}s" if timeout > 0 else "0s",
        # Serialized task results of one job the driver accepts; a larger
        # result fails the query ("Total size of serialized results ... is
        # bigger than spark.driver.maxResultSize") instead of filling the heap.
        "spark.driver.maxResultSize": str(config.int(MAX_RESULT_SIZE)),
    }


def install(spark: Any, config: Config) -> None:
    """The bounds that live in the JVM, once the SparkContext runs."""
    guard_task_errors(spark)
    timeout, readers = config.duration(QUERY_TIMEOUT), config.duration(READER_TIMEOUT)
    if timeout.total_seconds() > 0 or readers.total_seconds() > 0:
        reason = f"because the statement ran longer than {QUERY_TIMEOUT} ({format_duration(timeout)})"
        deadline = jclass(STATEMENT_DEADLINE, spark.sparkContext._jvm).install(
            spark.sparkContext._jsc.sc(), math.ceil(timeout.total_seconds() * 1000), reason)
        if readers.total_seconds() > 0:
            # A reader's statements: the gateway bound its sessions' user to the role
            # (AuthzCheck.java tells StatementDeadline who is a reader).
            deadline.readers(math.ceil(readers.total_seconds() * 1000),
                             f"because a reader's statement ran longer than {READER_TIMEOUT} "
                             f"({format_duration(readers)})")


def guard_task_errors(spark: Any) -> bool:
    """Keep a task's OutOfMemoryError (or stack overflow) from exiting the JVM
    of a local master; False where executors are other JVMs."""
    jsc = spark.sparkContext._jsc.sc()
    installed = bool(jclass(TASK_ERROR_GUARD, spark.sparkContext._jvm).install(jsc))
    if installed:
        log.info("task memory errors fail their query, not the server (TaskErrorGuard)")
    return installed


FEATURE = JvmFeature("bounds", settings=lambda config, user: spark_settings(config),
                     started=lambda spark, config, owns_metastore: install(spark, config))
