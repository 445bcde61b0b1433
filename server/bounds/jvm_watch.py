"""One life: the server process ends when its Spark JVM does (issue 51).

The driver JVM is a child process (session._start_jvm). If it goes — an
OutOfMemoryError that kills it, a ``kill -9``, a call that ends it — every
statement after that fails with "Cannot call methods on a stopped
SparkContext" while the Python process goes on accepting connections: a
server that looks alive to its supervisor and to clients' pools, and serves
nothing. So the process exits too, non-zero and with one clear log line,
and the supervisor (systemd, Kubernetes) starts a whole new one. What was
acknowledged is committed (docs/ingest.md), so nothing is lost by exiting.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tierlake.server")

# Distinct from 1 (a failed start) so a supervisor's logs tell the two apart.
EXIT_JVM_DIED = 3


def jvm_process() -> Any:
    """The driver JVM's ``Popen``, as pyspark's launcher keeps it (None when
    this process did not launch the JVM, e.g. a JVM that was already there)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    return getattr(gateway, "proc", None) if gateway is not None else None


def exit_process(code: int) -> None:
    """End this process now: its threads would only keep serving errors."""
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


def watch(stopping: threading.Event, exit: Callable[[int], None] = exit_process) -> threading.Thread | None:
    """A daemon thread that waits for the JVM to end; unless ``stopping`` is
    set by then (an orderly stop stops Spark itself), it logs why and calls
    ``exit(EXIT_JVM_DIED)``."""
    proc = jvm_process()
    if proc is None:
        return None

    def wait() -> None:
        code = proc.wait()
        if stopping.is_set():
            return
        log.critical("the Spark JVM (pid %d) exited with code %s while the server was running: the server exits "
                     "with code %d so that its supervisor starts a new one (acknowledged writes are committed)",
                     proc.pid, code, EXIT_JVM_DIED)
        exit(EXIT_JVM_DIED)

    thread = threading.Thread(target=wait, name="tierlake-jvm-watch", daemon=True)
    thread.start()
    return thread
