"""Small ``sys`` tables (coordinator state, jobs, round history) read and
written whole from Python, with Iceberg's optimistic concurrency."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from typing import Any

from tierlake import sql
from tierlake.server.exceptions import ConcurrentUpdateError
from tierlake.server.observability import metrics
from tierlake.server.runtime.jvm import jclass, string_map
from tierlake.server.runtime.jvm_errors import Kind, is_
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.state import housekeeping, state_version

log = logging.getLogger("tierlake.coordinator")
Q_ROWS_FROM_JSON = "queries/rows_from_json.sql"
MAX_ATTEMPTS = 8


def is_conflict(error: Exception) -> bool:
    """A commit lost to a concurrent writer (py4j wraps Iceberg's exceptions)."""
    return is_(error, Kind.COMMIT_CONFLICT)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.astimezone(timezone.utc)).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"cannot store {type(value).__name__}")


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(value: Any) -> Any:
    """JSON for the JVM path: timestamps as microseconds since the epoch."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.astimezone(timezone.utc)
        return (aware - _EPOCH) // timedelta(microseconds=1)
    raise TypeError(f"cannot store {type(value).__name__}")


def _aware(value: Any) -> Any:
    # pyspark returns naive local-time datetimes; give them a zone once, here.
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(timezone.utc)
    return value


# table name → (snapshot id, the rows of that snapshot), shared by every SmallTable of the process: a
# snapshot's rows never change, so an entry is right for as long as its snapshot is the table's current
# one, whoever reads (the coordinator and the planner's cross-check read the same state table). A commit
# made here files the rows it wrote: the next read needs no data file read (~30 ms each on the JVM path).
_ROWS: dict[str, tuple[int, list[dict[str, Any]]]] = {}


def _copy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: dict(v) if isinstance(v, dict) else v for k, v in r.items()} for r in rows]


class SmallTable:
    """One Iceberg table small enough to read and rewrite in one go."""

    def __init__(self, spark: Any, name: str):
        self.spark = spark
        self.name = name
        self._schema: Any = None
        self._jvm_io: bool | None = None  # None: not tried yet; False: the JVM class is missing
        self._loaded: Any = None  # the table object of the last load (its properties are that version's)

    @property
    def schema(self) -> Any:
        """The table's Spark schema: converted from the table object last loaded (no second lookup of
        the table), else read through Spark."""
        if self._schema is None:
            if self._loaded is not None:
                from pyspark.sql.types import StructType

                util = jclass("org.apache.iceberg.spark.SparkSchemaUtil", self.spark.sparkContext._jvm)
                self._schema = StructType.fromJson(json.loads(util.convert(self._loaded.schema()).json()))
            else:
                self._schema = self.spark.table(self.name).schema
        return self._schema

    def snapshot_id(self) -> int | None:
        snapshot = iceberg_table(self.spark, self.name).currentSnapshot()
        return None if snapshot is None else int(snapshot.snapshotId())

    def load(self) -> tuple[int | None, list[dict[str, Any]]]:
        """``(snapshot id, rows)``; an unchanged table is served from memory."""
        table = self._loaded = iceberg_table(self.spark, self.name)
        snapshot = table.currentSnapshot()
        if snapshot is None:
            return None, []
        snap = int(snapshot.snapshotId())
        cached = _ROWS.get(self.name)
        if cached is None or cached[0] != snap:
            rows: list[dict[str, Any]] = []
            io = self._io(table)
            if io is not None:
                rows = self._from_jvm(json.loads(io.read(table, snap)))
            else:
                for row in self.spark.read.option("snapshot-id", str(snap)).table(self.name).collect():
                    rows.append({k: _aware(v) for k, v in row.asDict().items()})
            cached = _ROWS[self.name] = (snap, rows)
        return snap, _copy(cached[1])

    # -- the JVM path (server/state/java/SmallTables.java): no Spark job ------
    def _io(self, table: Any) -> Any | None:
        """tierlake's ``SmallTables`` class when it can handle ``table``, else None (Spark is used)."""
        if self._jvm_io is False:
            return None
        try:
            io = jclass("io.tierlake.internal.SmallTables", self.spark.sparkContext._jvm)
            supported = bool(io.supports(table))
        except Exception:  # noqa: BLE001 - py4j: the class is not on the driver's class path
            log.info("%s is read and written through Spark (tierlake's SmallTables class is missing)", self.name)
            self._jvm_io = False
            return None
        self._jvm_io = True
        return io if supported else None

    def _timestamps(self) -> list[str]:
        from pyspark.sql.types import TimestampType

        return [f.name for f in self.schema.fields if isinstance(f.dataType, TimestampType)]

    def _from_jvm(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for name in self._timestamps():
            for row in rows:
                if row.get(name) is not None:
                    row[name] = _EPOCH + timedelta(microseconds=row[name])
        return rows

    def _to_jvm(self, rows: list[dict[str, Any]]) -> str:
        names = self.schema.fieldNames()
        return json.dumps([{n: r.get(n) for n in names} for r in rows], default=_micros)

    def _frame(self, rows: list[dict[str, Any]]) -> Any:
        names = self.schema.fieldNames()
        payload = json.dumps([{n: r.get(n) for n in names} for r in rows], default=_json_default)
        return self.spark.sql(
            sql.read(Q_ROWS_FROM_JSON),
            args={"rows": payload, "schema": f"array<{self.schema.simpleString()}>"},
        )

    def properties(self) -> dict[str, str]:
        """The table's Iceberg properties, as of now."""
        return string_map(iceberg_table(self.spark, self.name).properties())

    def replace(self, rows: list[dict[str, Any]], base: int | None, properties: dict[str, str] | None = None,
                table: Any = None) -> None:
        """Overwrite the table with ``rows``; fails if it changed since ``base``.

        ``properties`` are set on the table in the same commit (the JVM path), so
        they change exactly when the rows do. ``table``: the table object the rows were read from
        (not loaded again); the commit validates against ``base`` whatever the object has seen."""
        from pyspark.sql import functions as F

        if table is None:
            table = iceberg_table(self.spark, self.name)
        io = self._io(table)
        if io is not None:
            payload = self._to_jvm(rows)
            try:
                committed = int(io.replace(table, payload, -1 if base is None else base,
                                           json.dumps(properties) if properties else None))
            finally:
                state_version.bump()  # even a failed commit may have landed (commit state unknown)
            if committed >= 0:
                # The rows as a read of that snapshot returns them (the same JSON, the same conversions).
                _ROWS[self.name] = (committed, self._from_jvm(json.loads(payload)))
            housekeeping.note_commit(self.name)
            return
        writer = self._frame(rows).writeTo(self.name)
        if base is not None:
            writer = writer.option("validate-from-snapshot-id", str(base)).option("isolation-level", "serializable")
        try:
            writer.overwrite(F.lit(True))
        finally:
            state_version.bump()  # even a failed commit may have landed (commit state unknown)
        if properties:
            # Not in the rows' commit on this path: a counter set here only ever grows, so a
            # crash between the two commits leaves it behind the rows, and readers take the max.
            update = iceberg_table(self.spark, self.name).updateProperties()
            for key, value in properties.items():
                update = update.set(key, value)
            update.commit()
        housekeeping.note_commit(self.name)

    def update(self, change: Callable[[list[dict[str, Any]]], tuple[Any, bool]]) -> Any:
        """Optimistic read-modify-write: ``change(rows)`` edits the rows in place
        and returns ``(result, changed)``; a lost race re-reads and runs it again."""
        return self.update_with_properties(lambda rows, _props: (*change(rows), None))

    def update_with_properties(
        self, change: Callable[[list[dict[str, Any]], dict[str, str]], tuple[Any, bool, dict[str, str] | None]]
    ) -> Any:
        """:meth:`update` where ``change(rows, properties)`` also sees the table's
        properties and returns ``(result, changed, properties to set)``: they are
        committed with the rows (the coordinator's table-id counter)."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            self._loaded = None
            base, rows = self.load()
            # The properties of the version just loaded, not a second load per commit (every heartbeat's).
            current = self.properties() if self._loaded is None else string_map(self._loaded.properties())
            result, changed, props = change(rows, current)
            if not changed:
                return result
            try:
                self.replace(rows, base, props, table=self._loaded)
                return result
            except Exception as e:
                if not is_conflict(e):
                    raise
                metrics.commit_conflict(self.name)
                log.info("commit conflict on %s (attempt %d), retrying", self.name, attempt)
                time.sleep(0.05 * attempt)
        raise ConcurrentUpdateError(f"{self.name} kept changing concurrently ({MAX_ATTEMPTS} attempts)")

    def append(self, rows: list[dict[str, Any]], token: str | None = None) -> bool:
        """Append ``rows`` in one commit; returns whether it appended.

        With ``token`` the append is idempotent: if a commit carrying that
        token is already in the table's history (an earlier attempt whose
        outcome was unknown landed after all), nothing is appended. Retries
        pass the same rows with the same token."""
        if rows:
            table = iceberg_table(self.spark, self.name)
            io = self._io(table)
            try:
                if io is not None:
                    if token is not None:
                        appended = bool(io.appendOnce(table, self._to_jvm(rows), token))
                        housekeeping.note_commit(self.name)
                        return appended
                    io.append(table, self._to_jvm(rows))
                else:
                    self._frame(rows).writeTo(self.name).append()
            finally:
                state_version.bump()
            housekeeping.note_commit(self.name)
            return True
        return False
