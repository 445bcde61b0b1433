"""When a log chunk is not copied as files (no JVM): the class missing, a chunk too large."""

from __future__ import annotations

import pytest

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog import file_copy
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.planner import Chunk, StreamCommit


def chunk(bytes_: int) -> Chunk:
    commit = StreamCommit(1, 11, "append", {"added-files-size": str(bytes_), "added-records": "1"}, 0)
    return Chunk(None, 11, 0, 1, [commit])


class FakeSpark:
    class sparkContext:  # the attribute pyspark has
        _jvm = object()


def handle() -> TableHandle:
    """A handle whose tables are never loaded (the blockers below are decided before that)."""
    return TableHandle.loaded(FakeSpark(), TablePath("d", "t"), TablePath("d_lake", "t"), object(), object())


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(file_copy, "_missing", [])
    monkeypatch.setattr(file_copy, "_told", set())


def test_a_class_py4j_cannot_find_means_spark_writes(monkeypatch, fresh_state):
    # py4j answers an unknown class with a JavaPackage (not an error); it must not be called.
    from py4j.java_gateway import JavaPackage

    monkeypatch.setattr(file_copy, "jclass", lambda name, jvm: JavaPackage(name, None))
    assert file_copy.blocker(handle(), chunk(10)) == "tierlake's LakeFiles class is missing"
    assert file_copy._missing == [True]


def test_a_chunk_over_the_byte_limit_is_written_by_spark(monkeypatch, fresh_state):
    monkeypatch.setattr(file_copy, "jclass", lambda name, jvm: pytest.fail("no need to ask the JVM"))
    reason = file_copy.blocker(handle(), chunk(file_copy.COPY_MAX_BYTES + 1))
    assert reason is not None and "Spark writes them in parallel" in reason
    assert file_copy.blocker(handle(), Chunk(None, 11, 0, 1, [])) == "no stream commits"
