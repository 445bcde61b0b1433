"""One tiered table as a round works on it: :class:`TableHandle`.

The worker opens one handle per assignment (:meth:`TableHandle.open`) and
passes it down: the planner, the round's steps (lake schema sync, branch,
write, fast-forward), the quality gate, maintenance and the fresh view's
re-pin all read the table through it. It carries the stream and lake
identifiers, the assignment (table id, epoch, job), the stream's properties
and spec, the server's settings and the loaded Iceberg ``Table`` objects; no
module below the worker loads a table it was handed (a test counts the loads
of a round: one per table).

Loading a table resolves it through Spark's catalog and reads its metadata
file. Each step reads the handle's ``Table`` objects, which hold the
metadata as it was when they were loaded. What each step may rely on:

- the stream table as the round was planned: the plan's commits, the
  round's columns (a column added mid-round is the next round's) and the
  table's properties are fixed by it. A step whose read must agree with the
  stream Spark is about to read refreshes it (:meth:`fresh_stream`);
- the lake table as planned, for what the plan fixed (its position, the
  snapshot the round starts from). A step that decides on ``main`` or on
  the round's branch (opening the branch, the fast-forward, maintenance
  after Spark's own commits) refreshes it first (:meth:`fresh_lake`): the
  branch is written by Spark SQL, which this object does not see, and a
  concurrent writer must be seen as it was by a fresh load. The fencing
  itself is Iceberg's compare-and-set at commit, which never trusts a
  cached ``main``.

``refresh()`` asks the metastore for the table's metadata location and
reads the metadata file only when it changed; a commit made through the
object itself is seen by its next read (Iceberg refreshes after its own
commit).

A handle belongs to one thread at a time: the round's, then (once the round
reported) the fresh view's re-pin thread, which re-pins from its tables in
the process's own session (:meth:`in_session`).
"""

from __future__ import annotations

from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath, coordinator_path
from tierlake.server.catalog.tiered_tables import lake_of
from tierlake.server.runtime import iceberg_actions as im
from tierlake.server.runtime.jvm import string_map
from tierlake.server.runtime.session import iceberg_table


class TableHandle:
    """A tiered table's stream and lake, loaded once (on first use) and passed down.

    ``table_id``, ``epoch`` and ``job_id``: the assignment the round runs
    under (0, 0 and a name of its own for an atomic CTAS's staged tables).
    ``spec``: given for tables whose properties do not say it yet (a CTAS's
    staged stream); else read from the stream's properties. ``lake`` may also
    name a KV table (a KV snapshot writes the changelog into it the same way).
    ``overrides``: table properties this handle reads instead of the table's
    (:meth:`setting`; an atomic CTAS tiers its rows in one unbounded commit).
    """

    def __init__(self, spark: Any, stream: TablePath, lake: TablePath, *, table_id: int = 0, epoch: int = 0,
                 job_id: str = "", config: Any = None, spec: TieredSpec | None = None, path: str | None = None,
                 stream_table: Any = None, lake_table: Any = None, properties: dict[str, str] | None = None,
                 overrides: dict[str, Any] | None = None):
        self.spark, self.stream, self.lake, self.config = spark, stream, lake, config
        self.table_id, self.epoch, self.job_id = table_id, epoch, job_id
        self.path = path if path is not None else str(stream)  # as the coordinator names it
        self._stream_table, self._lake_table, self._locking_stream = stream_table, lake_table, None
        self._properties, self._spec = properties, spec
        self.overrides = dict(overrides or {})

    @classmethod
    def open(cls, spark: Any, config: Any, path: str, table_id: int = 0, epoch: int = 0,
             job_id: str = "") -> TableHandle:
        """The handle of an assigned table: its stream loaded, its lake the one it was registered with."""
        stream = coordinator_path(path)
        stream_table = iceberg_table(spark, stream.quoted)
        properties = string_map(stream_table.properties())
        return cls(spark, stream, lake_of(config, stream, properties), table_id=table_id, epoch=epoch,
                   job_id=job_id, config=config, path=path, stream_table=stream_table, properties=properties)

    def in_session(self, spark: Any) -> TableHandle:
        """The same table and loaded Iceberg tables, for statements run in ``spark`` (the fresh view's
        re-pin thread uses the process's session, not the round thread's, which goes on to its next round)."""
        other = TableHandle(spark, self.stream, self.lake, table_id=self.table_id, epoch=self.epoch,
                            job_id=self.job_id, config=self.config, spec=self._spec, path=self.path,
                            stream_table=self._stream_table, lake_table=self._lake_table,
                            properties=self._properties, overrides=self.overrides)
        other._locking_stream = self._locking_stream
        return other

    def __repr__(self) -> str:
        return f"TableHandle({self.stream} -> {self.lake}, table {self.table_id}, epoch {self.epoch})"

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
    def locking_stream(self) -> Any:
        """The stream table loaded through the catalog whose commits take metastore locks
        (``session.LOCKING_CATALOG``): maintenance commits to the stream through it, so the
        table's group committers hold back for them. Loaded once, when maintenance first needs it."""
        if self._locking_stream is None:
            self._locking_stream = iceberg_table(self.spark, self.stream.quoted, locking=True)
        else:
            self._locking_stream.refresh()
        return self._locking_stream

    @property
    def properties(self) -> dict[str, str]:
        """The stream table's properties as loaded, converted once."""
        if self._properties is None:
            self._properties = string_map(self.stream_table.properties())
        return self._properties

    @property
    def spec(self) -> TieredSpec:
        if self._spec is None:
            self._spec = TieredSpec.from_properties(self.properties)
        return self._spec

    def setting(self, key: str) -> Any:
        """A tiering property of the table, its server setting where the table has none."""
        if key in self.overrides:
            return self.overrides[key]
        return P.read(self.properties, key, self.config)

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

    def refresh(self) -> None:
        """Both tables refreshed and the stream's properties read again: a plan made again (a KV
        snapshot lease lost to retention, which may have moved the log start too)."""
        self.fresh_lake()
        self._properties = self.current_properties()
        self._spec = None

    def current_properties(self) -> dict[str, str]:
        """The stream's properties as they are now (the handle's stay as planned)."""
        return string_map(self.fresh_stream().properties())

    def data_files(self) -> tuple[int, int] | None:
        """Live data files of the stream and the lake as loaded (snapshot summaries, no scan); None if unreadable."""
        try:
            return im.data_file_counts(self.stream_table)[0], im.data_file_counts(self.lake_table)[0]
        except Exception:  # noqa: BLE001 - only a hint for when maintenance is due
            return None
