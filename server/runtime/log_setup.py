"""Logging: everything goes to ``$TIERLAKE_HOME/logs``, nothing to the console.

Python logs to ``tierlake.log``; the JVM (Spark, Hive, Iceberg) logs through a
log4j2 configuration we write to ``logs/spark.log``. A record is one line
however a client's text in it is made: Python's through
:class:`OneLineFormatter`, the JVM's with log4j2's ``%enc{…}{CRLF}`` (a
message's CR and LF written as ``\r`` and ``\n``). The CLI also points the
process's own stdout/stderr at ``logs/console.log`` so that the JVM child
process, which inherits them, cannot write to the terminal either.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from tierlake.server.escaping import printable

_LOG4J2 = """\
status = error
name = tierlake
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log_dir}/spark.log
appender.file.filePattern = {log_dir}/spark.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss.SSS}} %p [%t] %c{{1}}: %enc{{%m}}{{CRLF}}%n%ex
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 5
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.datanucleus.name = DataNucleus
logger.datanucleus.level = warn
logger.hive.name = org.apache.hadoop.hive
logger.hive.level = warn
logger.parquet.name = org.apache.parquet
logger.parquet.level = warn
logger.thriftcli.name = org.apache.hive.service.cli.thrift
logger.thriftcli.level = warn
"""


def log4j2_config(log_dir: Path, level: str = "WARN") -> Path:
    """Write the JVM's log4j2 configuration and return its path. ``level``
    (``tierlake.log.jvm-level``) is the root level: Spark logs several INFO
    lines per statement and job, which the default keeps out."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir.parent / "conf" / "log4j2.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_LOG4J2.format(log_dir=log_dir.as_posix(), level=level.lower()), encoding="utf-8")
    return path


class OneLineFormatter(logging.Formatter):
    """Every record begins one line of its own, whatever a client put in it.

    The message (a table name, a change type, a statement a client chose)
    is written through :func:`tierlake.server.escaping.printable`: a newline
    in it cannot forge a line, an ANSI sequence or a bidi mark cannot
    rewrite what an operator sees. A traceback's own line breaks are kept,
    and each of its lines is indented, so no line of a record but its first
    starts at the left margin, where every record's timestamp is."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if not text.isprintable():
            text = printable(text, keep="\n").replace("\n", "\n    ")
        return text


def configure_python_logging(log_dir: Path, level: int = logging.INFO) -> None:
    """Send the ``tierlake`` loggers (and py4j's) to ``logs/tierlake.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(
        log_dir / "tierlake.log", maxBytes=50 * 1024 * 1024, backupCount=5, encoding="utf-8"
    )
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_tierlake", False)]:
        root.removeHandler(old)
    handler._tierlake = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.WARNING)


# Libraries whose INFO lines are about their own workings, not the server's: Great Expectations logs
# hundreds per validation (its decorators and registries), PyHive one per statement it sends (every
# procedure call of a tiering service), py4j one per gateway callback.
THIRD_PARTY = ("py4j", "great_expectations", "pyhive", "thrift", "thrift_sasl", "urllib3", "sqlalchemy",
               "numexpr", "matplotlib", "selenium")


def redirect_console(log_dir: Path) -> int:
    """Point fds 1 and 2 at ``logs/console.log``; return a dup of the old stdout."""
    log_dir.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1)
    fd = os.open(log_dir / "console.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return saved
