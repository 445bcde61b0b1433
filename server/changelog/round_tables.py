"""The stream and lake Iceberg tables of one round, loaded once and passed
through its steps (plan, lake schema sync, branch, write, fast-forward,
fresh view).

Loading a table resolves it through Spark's catalog and reads its metadata
file; a round used to do that about twenty times. Each step now reads the
round's ``Table`` objects, which hold the metadata as it was when they were
loaded. What each step may rely on:

- the stream table as the round was planned: the plan's commits, the
  round's columns (a column added mid-round is the next round's) and the
  table's properties are fixed by it. A step whose read must agree with the
  stream Spark is about to read refreshes it (:meth:`fresh_stream`);
- the lake table as planned, for what the plan fixed (its position, the
  snapshot the round starts from). A step that decides on ``main`` or on
  the round's branch (opening the branch, the fast-forward) refreshes it
  first (:meth:`fresh_lake`): the branch is written by Spark SQL, which
  this object does not see, and a concurrent writer must be seen as it was
  by a fresh load. The fencing itself is Iceberg's compare-and-set at
  commit, which never trusts a cached ``main``.

``refresh()`` asks the metastore for the table's metadata location and
reads the metadata file only when it changed; a commit made through the
object itself is seen by its next read (Iceberg refreshes after its own
commit).
"""

from __future__ import annotations

from typing import Any

from tierlake.server.catalog.table_path import TablePath
from tierlake.server.runtime import iceberg_actions as im
from tierlake.server.runtime.jvm import string_map
from tierlake.server.runtime.session import iceberg_table


class RoundTables:
    """One round's stream and lake ``Table`` objects (loaded on first use), and the stream's properties."""

    def __init__(self, spark: Any, stream: TablePath, lake: TablePath, stream_table: Any = None,
                 lake_table: Any = None, stream_properties: dict[str, str] | None = None):
        self.spark, self.stream, self.lake = spark, stream, lake
        self._stream_table, self._lake_table = stream_table, lake_table
        self._stream_properties = stream_properties

    @property
    def stream_table(self) -> Any:
        if self._stream_table is None:
            self._stream_table = iceberg_table(self.spark, self.stream.quoted)
        return self._stream_table

    @property
    def lake_table(self) -> Any:
        if self._lake_table is None:
            self._lake_table = iceberg_table(self.spark, self.lake.quoted)
        return self._lake_table

    @property
    def stream_properties(self) -> dict[str, str]:
        """The stream table's properties as loaded, converted once."""
        if self._stream_properties is None:
            self._stream_properties = string_map(self.stream_table.properties())
        return self._stream_properties

    def fresh_lake(self) -> Any:
        """The lake table refreshed: ``main`` and the branches as they are now."""
        table = self.lake_table
        table.refresh()
        return table

    def fresh_stream(self) -> Any:
        """The stream table refreshed: its current schema as a read started now sees it.

        The properties stay as planned (the round's spec does not change mid-round)."""
        table = self.stream_table
        table.refresh()
        return table

    def data_files(self) -> tuple[int, int] | None:
        """Live data files of the stream and the lake as loaded (snapshot summaries, no scan); None if unreadable."""
        try:
            return im.data_file_counts(self.stream_table)[0], im.data_file_counts(self.lake_table)[0]
        except Exception:  # noqa: BLE001 - only a hint for when maintenance is due
            return None
