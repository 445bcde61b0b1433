"""One tiered table as a round works on it: :class:`TableHandle`, and the :class:`Assignment` it runs under.

The worker opens one handle per assignment (:meth:`TableHandle.open`) and
passes it down: the planner, the round's steps (lake schema sync, branch,
write, fast-forward), the quality gate, maintenance and the fresh view's
re-pin all read the table through it. A handle is the table: its stream and
lake paths (and the coordinator's name of it), the stream's properties and
spec, the server's settings and the loaded Iceberg ``Table`` objects. Its
``assignment`` is who works on it: the coordinator's table id and epoch and
the job (none outside a round). No module below the worker loads a table it
was handed (a test counts the loads of a round: one per table).

Made one way per use: :meth:`~TableHandle.open` (an assigned table),
``TableHandle(spark, stream, lake, config)`` (both paths known, outside a
round: the fresh view, log retention, ``sys.validate``; each table loaded on
first use), :meth:`~TableHandle.of` (a table named by its stream),
:meth:`~TableHandle.staged` (an atomic CTAS's staged tables),
:meth:`~TableHandle.loaded` (tables the caller loaded: a KV snapshot writes
the changelog into its KV table as into a lake); :meth:`~TableHandle.in_session`
is the same handle for another session.

Loading a table resolves it through Spark's catalog and reads its metadata
file. Each step reads the handle's ``Table`` objects, which hold the
metadata as it was when they were loaded. What each step may rely on:

- the stream table as the round was planned: the plan's commits, the
  round's columns (a column added mid-round is the next round's) and the
  table's properties are fixed by it. A step whose read must agree with the
  stream Spark is about to read refreshes it (:meth:`fresh_stream`);
- the lake table as planned, for what the plan fixed (its position, the
  snapshot the round starts from). A step that decides on ``main`` or on
  the round's branch (opening the branch, the fast-forward, the quality
  gate, maintenance after Spark's own commits) refreshes it first
  (:meth:`fresh_lake`): the branch is written by Spark SQL, which this
  object does not see, and a concurrent writer must be seen as it was by a
  fresh load. The fencing itself is Iceberg's compare-and-set at commit,
  which never trusts a cached ``main``.

``refresh()`` asks the metastore for the table's metadata location and
reads the metadata file only when it changed; a commit made through the
object itself is seen by its next read (Iceberg refreshes after its own
commit).

A handle belongs to one thread at a time: the round's, then (once the round
reported) the fresh view's re-pin thread, which re-pins from its tables in
the process's own session (:meth:`in_session`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tierlake.server.catalog import properties as P
from tierlake.server.catalog.spec import TieredSpec
from tierlake.server.catalog.table_path import TablePath, coordinator_path, load_table
from tierlake.server.catalog.tiered_tables import lake_of
from tierlake.server.runtime import iceberg_actions as im
from tierlake.server.runtime.jvm import string_map


@dataclass(frozen=True)
class Assignment:
    """Who works on a table: the coordinator's table id and tiering epoch, and the job.

    :data:`UNASSIGNED` outside a round (DDL, the fresh view, a KV snapshot); an atomic CTAS's staged
    tables run under table id 0, epoch 0 and a job name of their own (:meth:`TableHandle.staged`)."""

    table_id: int = 0
    epoch: int = 0
    job_id: str = ""


UNASSIGNED = Assignment()


class TableHandle:
    """A tiered table's stream and lake, loaded once (on first use) and passed down.

    Outside a round (no assignment) unless a factory gave one. ``lake`` may also name a KV table
    (a KV snapshot writes the changelog into it the same way). ``path``: the table as the
    coordinator names it. ``overrides``: table properties this handle reads instead of the
    table's (:meth:`setting`, :meth:`with_settings`)."""

    def __init__(self, spark: Any, stream: TablePath, lake: TablePath, config: Any = None,
                 assignment: Assignment = UNASSIGNED):
        self.spark, self.stream, self.lake, self.config = spark, stream, lake, config
        self.assignment = assignment
        self.path = str(stream)  # as the coordinator names it
        self.overrides: dict[str, Any] = {}
        self._stream_table: Any = None
        self._lake_table: Any = None
        self._locking_stream: Any = None
        self._properties: dict[str, str] | None = None
        self._spec: TieredSpec | None = None

    @classmethod
    def open(cls, spark: Any, config: Any, path: str, assignment: Assignment = UNASSIGNED) -> TableHandle:
        """The handle of an assigned table (``path``: the coordinator's name of it): its stream loaded,
        its lake the one it was registered with."""
        handle = cls.of(spark, config, coordinator_path(path), assignment)
        handle.path = path
        return handle

    @classmethod
    def of(cls, spark: Any, config: Any, stream: TablePath, assignment: Assignment = UNASSIGNED) -> TableHandle:
        """The table whose stream is ``stream``: the stream loaded, the lake the one it was registered
        with (its ``tierlake.lake-table`` property)."""
        stream_table = load_table(spark, stream)
        properties = string_map(stream_table.properties())
        handle = cls(spark, stream, lake_of(config, stream, properties), config, assignment)
        handle._stream_table, handle._properties = stream_table, properties
        return handle

    @classmethod
    def staged(cls, spark: Any, config: Any, stream: TablePath, lake: TablePath, spec: TieredSpec,
               job_id: str) -> TableHandle:
        """An atomic CTAS's staged tables: the spec given (the staged stream's properties do not say it
        yet), table id and epoch 0, and its rows tiered in one unbounded commit."""
        handle = cls(spark, stream, lake, config, Assignment(job_id=job_id))
        handle._spec = spec
        return handle.with_settings({P.MAX_ROUND: None, P.CHUNK_ROWS: 1 << 62})

    @classmethod
    def loaded(cls, spark: Any, stream: TablePath, lake: TablePath, stream_table: Any = None,
               lake_table: Any = None, *, config: Any = None, spec: TieredSpec | None = None) -> TableHandle:
        """A handle over tables the caller loaded (None: loaded on first use): a KV snapshot's, whose
        lake is the KV table. ``spec``: for a stream whose properties do not say it."""
        handle = cls(spark, stream, lake, config)
        handle._stream_table, handle._lake_table, handle._spec = stream_table, lake_table, spec
        return handle

    def with_settings(self, overrides: dict[str, Any]) -> TableHandle:
        """This handle reading ``overrides`` instead of the table's properties (:meth:`setting`)."""
        other = copy.copy(self)
        other.overrides = {**self.overrides, **overrides}
        return other

    def in_session(self, spark: Any) -> TableHandle:
        """The same table and loaded Iceberg tables, for statements run in ``spark`` (the fresh view's
        re-pin thread uses the process's session, not the round thread's, which goes on to its next round)."""
        other = copy.copy(self)
        other.spark = spark
        return other

    def __repr__(self) -> str:
        return (f"TableHandle({self.stream} -> {self.lake}, table {self.assignment.table_id}, "
                f"epoch {self.assignment.epoch})")

    @property
    def stream_table(self) -> Any:
        if self._stream_table is None:
            self._stream_table = load_table(self.spark, self.stream)
        return self._stream_table

    @property
    def lake_table(self) -> Any:
        if self._lake_table is None:
            self._lake_table = load_table(self.spark, self.lake)
        return self._lake_table

    @property
    def locking_stream(self) -> Any:
        """The stream table loaded through the catalog whose commits take metastore locks
        (``session.LOCKING_CATALOG``): maintenance commits to the stream through it, so the
        table's group committers hold back for them. Loaded once, when maintenance first needs it."""
        if self._locking_stream is None:
            self._locking_stream = load_table(self.spark, self.stream, locking=True)
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
        lake_table = self.lake_table
        lake_table.refresh()
        return lake_table

    def fresh_stream(self) -> Any:
        """The stream table refreshed: its current schema as a read started now sees it.

        The properties stay as planned (the round's spec does not change mid-round)."""
        stream_table = self.stream_table
        stream_table.refresh()
        return stream_table

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


class OnHandle:
    """The table's identity, read through the ``handle`` of a class that carries one (a round's plan,
    a quality gate's target): the handle is the one place it is kept."""

    handle: TableHandle

    @property
    def stream(self) -> TablePath:
        return self.handle.stream

    @property
    def lake(self) -> TablePath:
        return self.handle.lake

    @property
    def spec(self) -> TieredSpec:
        return self.handle.spec
