"""The one reader of JVM failures (server/runtime/jvm_errors.py), without a JVM:
py4j's proxies stood in by objects with the same getters."""

from __future__ import annotations

import pytest

from tierlake.server.runtime import jvm_errors
from tierlake.server.runtime.jvm_errors import Kind, SimulatedJavaError, failure, is_, raised_by_sql


class _Class:
    def __init__(self, name: str):
        self.name = name

    def getName(self) -> str:
        return self.name


class FakeThrowable:
    """What py4j hands over for a Java throwable: a class, a message, a cause."""

    def __init__(self, name: str, message: str | None, cause: FakeThrowable | None = None):
        self.name, self.message, self.cause = name, message, cause

    def getClass(self) -> _Class:
        return _Class(self.name)

    def getMessage(self) -> str | None:
        return self.message

    def getCause(self) -> FakeThrowable | None:
        return self.cause


class Py4JLike(Exception):
    def __init__(self, java: FakeThrowable):
        super().__init__("An error occurred while calling o42.commit")
        self.java_exception = java


class CapturedLike(Exception):
    def __init__(self, java: FakeThrowable):
        super().__init__(java.getMessage())
        self._origin = java


ICEBERG = "org.apache.iceberg.exceptions."


def test_the_cause_chain_is_read_outermost_first_through_either_wrapping():
    java = FakeThrowable("org.apache.spark.SparkException", "Job aborted",
                         FakeThrowable(ICEBERG + "CommitFailedException", "Base metadata location changed"))
    for wrapped in (Py4JLike(java), CapturedLike(java)):
        found = failure(wrapped)
        assert found.classes == ("org.apache.spark.SparkException", ICEBERG + "CommitFailedException")
        assert found.summary == "SparkException: Job aborted; caused by CommitFailedException: Base metadata " \
                                "location changed"
        assert is_(wrapped, Kind.COMMIT_CONFLICT) and is_(wrapped, Kind.COMMIT_FAILED)
        assert not is_(wrapped, Kind.COMMIT_STATE_UNKNOWN)


def test_python_errors_are_never_taken_for_java_ones_whatever_their_text():
    text = RuntimeError("CommitStateUnknownException: already exists, not an ancestor, has been modified")
    assert failure(text) is None
    assert not any(is_(text, kind) for kind in Kind)
    assert jvm_errors.sqlstate(text) is None and jvm_errors.message(text) == str(text)


@pytest.mark.parametrize(("java", "kind"), [
    (FakeThrowable(ICEBERG + "ValidationException", "Cannot fast-forward: main is not an ancestor of b"),
     Kind.NOT_AN_ANCESTOR),
    (FakeThrowable("java.lang.IllegalArgumentException", "Cannot expire 7: Still referenced by refs: [t]"),
     Kind.STILL_REFERENCED),
    (FakeThrowable("org.apache.hadoop.hive.metastore.api.MetaException", "The table has been modified. The "
                   "parameter value for key 'tierlake_fresh_pin' is 'a'. The expected was value was 'b'"),
     Kind.METASTORE_MODIFIED),
    (FakeThrowable("org.apache.hadoop.hive.metastore.api.NoSuchObjectException", "shop.v table not found"),
     Kind.NO_SUCH_OBJECT),
    (FakeThrowable("io.tierlake.internal.StreamIngest$Cancelled", "tierlake: cancelled before its commit"),
     Kind.INGEST_CANCELLED),
    (FakeThrowable("org.apache.spark.SparkException", "Job aborted",
                   FakeThrowable(ICEBERG + "CommitStateUnknownException", "Failed to commit")),
     Kind.COMMIT_STATE_UNKNOWN),
    (FakeThrowable(ICEBERG + "AlreadyExistsException", "Table already exists: shop.t"), Kind.ALREADY_EXISTS),
])
def test_each_kind_is_told_by_its_class_or_its_one_marker(java, kind):
    assert is_(Py4JLike(java), kind)
    others = {k for k in Kind if is_(Py4JLike(java), k)} - {kind, Kind.COMMIT_CONFLICT, Kind.COMMIT_FAILED}
    assert not others, others


def test_spark_error_classes_decide_for_spark_errors():
    exists = SimulatedJavaError("org.apache.spark.sql.AnalysisException", error_class="TABLE_OR_VIEW_ALREADY_EXISTS")
    assert is_(exists, Kind.ALREADY_EXISTS) and not is_(exists, Kind.FIELDS_ALREADY_EXISTS)
    fields = SimulatedJavaError("org.apache.spark.sql.AnalysisException", error_class="FIELDS_ALREADY_EXISTS")
    assert is_(fields, Kind.FIELDS_ALREADY_EXISTS)
    missing = SimulatedJavaError("org.apache.spark.sql.AnalysisException", error_class="TABLE_OR_VIEW_NOT_FOUND")
    assert not is_(missing, Kind.ALREADY_EXISTS)


def test_a_raise_error_of_our_sql_is_found_by_its_marker_at_the_start_of_a_message():
    guard = "tierlake: the chunk breaks the changelog rule of primary-key tables"
    task = FakeThrowable("org.apache.spark.SparkException", "Job aborted due to stage failure: Task 0 failed: "
                         f"java.lang.RuntimeException: {guard}: 2 keys",
                         FakeThrowable("java.lang.RuntimeException", f"{guard}: 2 keys"))
    assert raised_by_sql(Py4JLike(task), guard)
    quoted = FakeThrowable("org.apache.spark.sql.AnalysisException", f"cannot resolve 'x' in '{guard}'")
    assert not raised_by_sql(Py4JLike(quoted), guard)


def test_iceberg_catalog_exceptions_get_tierlakes_sqlstate_through_the_chain():
    java = FakeThrowable("java.lang.RuntimeException", "wrapped",
                         FakeThrowable(ICEBERG + "NoSuchTableException", "Table does not exist: shop.t"))
    assert jvm_errors.sqlstate(Py4JLike(java)) == "42P01"


def test_a_cause_cycle_does_not_loop():
    java = FakeThrowable("java.lang.RuntimeException", "a")
    java.cause = java
    assert len(failure(Py4JLike(java)).classes) == 8
