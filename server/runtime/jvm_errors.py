"""The one place a JVM exception is read: what Python decides on is its
class, its cause chain and Spark's error class, never a search of its text
elsewhere in the tree (issue 52: twelve call sites used to match Java
messages by substring, each in its own way).

A failure crosses py4j in two wrappings: pyspark's ``CapturedException``
(``spark.sql`` errors; the Java throwable is its ``_origin``) and py4j's raw
``Py4JJavaError`` (a direct call into Iceberg, the metastore client or our
classes; ``java_exception``). :func:`failure` reads either once into a
:class:`JavaFailure` (class names and messages through the cause chain,
Spark's error class and SQLSTATE), and :func:`is_` answers the questions the
engine asks of it (:class:`Kind`).

Some answers can only come from a message: Iceberg says "not an ancestor"
with the same ``ValidationException`` it uses for every failed validation,
Hive's metastore sends every refusal as a ``MetaException``, and a
``raise_error`` in tierlake's own SQL arrives as a plain ``RuntimeException``
(Spark 3.5 gives it no error class). Those few markers live in :data:`_MESSAGES`, here
and nowhere else.

Tests whose fakes stand in for the JVM raise :class:`SimulatedJavaError`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tierlake.server.exceptions import JAVA_EXCEPTION_STATES

# The cause chain is short in practice (Spark → Iceberg → metastore); a cycle must not loop.
_MAX_CAUSES = 8
ICEBERG = "org.apache.iceberg.exceptions."


class Kind(enum.Enum):
    """A question the engine asks of a JVM failure."""

    COMMIT_CONFLICT = "a commit lost to a concurrent one (Iceberg retries exhausted or validation failed)"
    COMMIT_FAILED = "an Iceberg commit failed or its outcome is unknown"
    COMMIT_STATE_UNKNOWN = "the metastore did not confirm a commit (it may have landed)"
    ALREADY_EXISTS = "a table, view or namespace of that name exists"
    FIELDS_ALREADY_EXISTS = "an added column exists"
    NO_SUCH_OBJECT = "the metastore has no such table"
    NOT_AN_ANCESTOR = "a branch moved: a fast-forward or cherry-pick onto a snapshot that is not an ancestor"
    STILL_REFERENCED = "a snapshot a branch or tag still references"
    NULL_IN_NON_NULLABLE = "a NULL written into a NOT NULL column (Spark's write check)"
    METASTORE_MODIFIED = "the metastore's compare-and-set of a table parameter lost"
    STALE_COPY = "the embedded metastore refused an alter made from a stale copy (CasAlterHandler.java)"
    INGEST_CANCELLED = "an ingest statement cancelled before its commit (StreamIngest.java)"
    INGEST_REFUSED = "an ingest statement's rows refused by its checks (StreamIngest.java)"


@dataclass(frozen=True)
class JavaFailure:
    """A JVM exception as Python sees it: outermost first through the cause chain."""

    classes: tuple[str, ...]  # fully qualified class names
    messages: tuple[str, ...]
    error_class: str | None = None  # Spark's (SparkThrowable.getErrorClass), of the first that has one
    sqlstate: str | None = None
    origin: Any = None  # the outermost Java throwable (py4j), for its own getters

    def has_class(self, *names: str) -> bool:
        """Any throwable in the chain is of one of ``names`` (fully qualified, or simple)."""
        return any(c in names or c.rpartition(".")[2] in names or c.rpartition("$")[2] in names
                   for c in self.classes)

    def says(self, marker: str) -> bool:
        return any(marker in m for m in self.messages)

    @property
    def summary(self) -> str:
        """``Class: message; caused by …`` (up to four), for an error that names what Java said."""
        pairs = list(zip(self.classes, self.messages, strict=True))[:4]
        return "; caused by ".join(f"{c.rpartition('.')[2].rpartition('$')[2]}: {m}" for c, m in pairs)

    @property
    def message(self) -> str:
        return self.messages[0] if self.messages else ""


class SimulatedJavaError(RuntimeError):
    """A Python stand-in for a JVM exception (tests' fakes of Iceberg tables and clients)."""

    def __init__(self, *classes: str, message: str = "", error_class: str | None = None):
        classes = classes or ("java.lang.RuntimeException",)
        super().__init__(f"{classes[0]}: {message}")
        self.failure = JavaFailure(tuple(classes), tuple(message for _ in classes), error_class)


def _java_of(e: BaseException) -> Any:
    origin = getattr(e, "_origin", None)  # pyspark's CapturedException
    if origin is not None:
        return origin
    java = getattr(e, "java_exception", None)  # py4j's Py4JJavaError
    return java


def failure(e: BaseException) -> JavaFailure | None:
    """``e``'s JVM exception read once (a few py4j calls), or None when ``e`` is Python's own."""
    if isinstance(e, SimulatedJavaError):
        return e.failure
    java = _java_of(e)
    if java is None:
        return None
    classes, messages = [], []
    error_class = sqlstate = None
    current, seen = java, 0
    try:
        while current is not None and seen < _MAX_CAUSES:
            classes.append(str(current.getClass().getName()))
            messages.append(str(current.getMessage() or ""))
            if error_class is None and _is_spark_throwable(current):
                found = current.getErrorClass()
                if found is not None:
                    error_class = str(found)
                    state = current.getSqlState()
                    sqlstate = None if state is None else str(state)
            current, seen = current.getCause(), seen + 1
    except Exception:  # noqa: BLE001 - a JVM gone mid-read: what was read is all there is
        pass
    return JavaFailure(tuple(classes), tuple(messages), error_class, sqlstate, java)


def _is_spark_throwable(java: Any) -> bool:
    from py4j.java_gateway import JavaObject, is_instance_of
    from pyspark import SparkContext

    # Only a py4j proxy can be asked (a test's stand-in is not one, and py4j raises on it).
    gateway = SparkContext._gateway
    return (isinstance(java, JavaObject) and gateway is not None
            and is_instance_of(gateway, java, "org.apache.spark.SparkThrowable"))


# Where only a message tells (the module's docstring says why), the marker per kind.
_MESSAGES = {
    Kind.NOT_AN_ANCESTOR: ("not an ancestor", "Cannot fast-forward"),
    Kind.STILL_REFERENCED: ("Still referenced by refs",),
    Kind.NULL_IN_NON_NULLABLE: ("Null value appeared in non-nullable field",),
    Kind.METASTORE_MODIFIED: ("has been modified",),
    Kind.STALE_COPY: ("stale copy",),
    # Hive's metastore sends "Table … already exists" as a MetaException or AlreadyExistsException text.
    Kind.ALREADY_EXISTS: ("already exists",),
}
_CLASSES = {
    Kind.COMMIT_CONFLICT: (ICEBERG + "ValidationException", ICEBERG + "CommitFailedException",
                           ICEBERG + "CommitStateUnknownException", ICEBERG + "AlreadyExistsException"),
    Kind.COMMIT_FAILED: (ICEBERG + "CommitFailedException", ICEBERG + "CommitStateUnknownException"),
    Kind.COMMIT_STATE_UNKNOWN: (ICEBERG + "CommitStateUnknownException",),
    Kind.ALREADY_EXISTS: (ICEBERG + "AlreadyExistsException",
                          "org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException",
                          "org.apache.spark.sql.catalyst.analysis.ViewAlreadyExistsException",
                          "org.apache.spark.sql.catalyst.analysis.NamespaceAlreadyExistsException",
                          "org.apache.hadoop.hive.metastore.api.AlreadyExistsException"),
    Kind.NO_SUCH_OBJECT: ("org.apache.hadoop.hive.metastore.api.NoSuchObjectException",),
    Kind.INGEST_CANCELLED: ("io.tierlake.internal.StreamIngest$Cancelled",),
    Kind.INGEST_REFUSED: ("io.tierlake.internal.StreamIngest$Refused",),
}
# Spark's error classes per kind: a name, or a suffix every error class of the kind ends with.
_ERROR_CLASSES = {
    Kind.ALREADY_EXISTS: ("_ALREADY_EXISTS",),  # TABLE_OR_VIEW_, VIEW_, SCHEMA_, LOCATION_, PATH_ …
    Kind.FIELDS_ALREADY_EXISTS: ("FIELDS_ALREADY_EXISTS", "COLUMN_ALREADY_EXISTS"),
}


def is_(e: BaseException | JavaFailure | None, kind: Kind) -> bool:
    """Whether JVM failure ``e`` is of ``kind`` (False for Python's own errors)."""
    found = e if isinstance(e, JavaFailure) or e is None else failure(e)
    if found is None:
        return False
    if found.has_class(*_CLASSES.get(kind, ())):
        return True
    if found.error_class is not None and any(
            found.error_class == name or (name.startswith("_") and found.error_class.endswith(name))
            for name in _ERROR_CLASSES.get(kind, ())):
        return True
    return any(found.says(marker) for marker in _MESSAGES.get(kind, ()))


def raised_by_sql(e: BaseException | JavaFailure | None, marker: str) -> bool:
    """``e`` is a ``raise_error`` of tierlake's own SQL whose message starts with ``marker`` (the
    changelog guard). In a task it reaches the driver wrapped: SparkException "Job aborted … :
    java.lang.RuntimeException: <marker>…", caused by the RuntimeException itself."""
    found = e if isinstance(e, JavaFailure) or e is None else failure(e)
    if found is None:
        return False
    return any(m.startswith(marker) or f": {marker}" in m for m in found.messages)


def sqlstate(e: BaseException) -> str | None:
    """The SQLSTATE of a JVM failure: Spark's own, or the one tierlake gives Iceberg's catalog
    exceptions (they carry none) — the first through the cause chain."""
    found = failure(e)
    if found is None:
        return None
    if found.sqlstate is not None:
        return found.sqlstate
    for name in found.classes:
        state = JAVA_EXCEPTION_STATES.get(name.rpartition(".")[2])
        if state is not None:
            return state
    return None


def message(e: BaseException) -> str:
    """What Java said (its outermost message), or ``str(e)`` for Python's own errors."""
    found = failure(e)
    return found.message if found is not None and found.messages else str(e)
