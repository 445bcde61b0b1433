"""A table's suite — derived checks plus user expectations — its runs, and
where both are stored (``sys.quality_expectations``, ``sys.quality_results``).

Derived checks:

- primary-key tables: every key column not null, the key unique (one column:
  ``expect_column_values_to_be_unique``; several:
  ``expect_compound_columns_to_be_unique``);
- log tables: the lake holds exactly the stream's rows up to the tiered
  position (``expect_table_row_count_to_equal``): fewer means lost rows, more
  means duplicates or rows written behind tierlake's back;
- every table: the lake's newest tiering commit is not beyond the tiered
  position (``tierlake_lake_position_at_most``, computed from the lake's
  snapshot summaries rather than by GX: it is metadata, not rows);
- ``sys.validate`` only (``Target.compare_stream``): the lake's rows equal
  what the stream implies up to the lake's tiered position
  (``tierlake_lake_equals_stream``, :mod:`.lake_diff`: one Spark query, not
  GX). Rounds (``warn``, ``block``) do not run it: a round writes exactly
  what the changelog says, and the comparison costs a scan of the lake and
  the stream prefix.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tierlake.server.catalog import reads
from tierlake.server.catalog.properties import LAKE_TIERED_POSITION
from tierlake.server.catalog.table_path import TablePath
from tierlake.server.changelog.handle import OnHandle, TableHandle
from tierlake.server.changelog.planner import SOURCE_POSITION
from tierlake.server.changelog.planner import summary as summary_of
from tierlake.server.quality import gx, lake_diff
from tierlake.server.state.state_table import SmallTable

log = logging.getLogger("tierlake.quality")

EXPECTATIONS_TABLE = "sys.quality_expectations"
RESULTS_TABLE = "sys.quality_results"
POSITION_CHECK = "tierlake_lake_position_at_most"
DEFAULT_SAMPLE_SIZE = 10


@dataclass
class Target(OnHandle):
    """What one run validates: a lake table (at ``main`` or a branch) against a stream position."""

    table_id: int | None
    handle: TableHandle  # the table validated, read through its loaded tables (never loaded again here)
    position: int
    stream_snapshot_id: int | None = None  # the stream snapshot at ``position``, if known
    ref: str = "main"
    trigger: str = "validate"
    epoch: int | None = None
    compare_stream: bool = False  # add tierlake_lake_equals_stream (sys.validate)
    kv_bases: tuple[lake_diff.KvBase, ...] = ()  # retained KV snapshots that comparison may start from


@dataclass
class RunResult:
    run_id: str
    outcomes: list[gx.Outcome]

    @property
    def success(self) -> bool:
        return all(o.success for o in self.outcomes)

    @property
    def failures(self) -> list[gx.Outcome]:
        return [o for o in self.outcomes if not o.success]


def canonical_kwargs(kwargs: dict[str, Any]) -> str:
    return json.dumps(kwargs, sort_keys=True, default=str)


def user_expectations(spark: Any, stream: TablePath) -> list[tuple[str, dict[str, Any]]]:
    _, rows = SmallTable(spark, EXPECTATIONS_TABLE).load()
    rows = [r for r in rows if (r["database_name"], r["table_name"]) == (stream.database, stream.table)]
    rows.sort(key=lambda r: (r["created_at"], r["expectation"], r["kwargs"]))
    return [(r["expectation"], json.loads(r["kwargs"] or "{}")) for r in rows]


def derived_expectations(spark: Any, target: Target) -> list[tuple[str, dict[str, Any]]]:
    keys = target.spec.primary_key
    out: list[tuple[str, dict[str, Any]]] = [("expect_column_values_to_not_be_null", {"column": k}) for k in keys]
    if len(keys) == 1:
        out.append(("expect_column_values_to_be_unique", {"column": keys[0]}))
    elif keys:
        out.append(("expect_compound_columns_to_be_unique", {"column_list": list(keys)}))
    else:
        out.append(("expect_table_row_count_to_equal", {"value": stream_rows(spark, target)}))
    return out


def stream_snapshot_at(stream_table: Any, position: int) -> int | None:
    """The stream snapshot whose sequence number (log position) is ``position``."""
    snapshot = stream_table.currentSnapshot()
    while snapshot is not None and int(snapshot.sequenceNumber()) > position:
        parent = snapshot.parentId()
        snapshot = stream_table.snapshot(parent) if parent is not None else None
    return None if snapshot is None else int(snapshot.snapshotId())


def stream_rows(spark: Any, target: Target) -> int:
    """Rows of the (append-only) stream table up to the target's position."""
    if target.position <= 0:
        return 0
    sid = target.stream_snapshot_id or stream_snapshot_at(target.handle.stream_table, target.position)
    if sid is None:
        return 0
    return reads.at_snapshot(spark, target.stream, sid).count()


def _lake_frame(spark: Any, target: Target) -> Any:
    if target.ref != "main":
        return reads.on_branch(spark, target.lake, target.ref)
    return reads.at_snapshot(spark, target.lake, None)


def _lake_snapshot(spark: Any, target: Target) -> tuple[int | None, int]:
    """``(snapshot id, tiered position recorded in its summaries)`` of the validated ref: the handle's lake
    table refreshed (a round's branch was written by Spark SQL, which the loaded table does not see)."""
    lake_table = target.handle.fresh_lake()
    snapshot = lake_table.currentSnapshot() if target.ref == "main" else lake_table.snapshot(target.ref)
    head = None if snapshot is None else int(snapshot.snapshotId())
    while snapshot is not None:
        summary = summary_of(snapshot)
        if SOURCE_POSITION in summary:
            return head, int(summary[SOURCE_POSITION])
        parent = snapshot.parentId()
        snapshot = lake_table.snapshot(parent) if parent is not None else None
    # Compaction + expiry removed the summaries: the position every tiering commit also records as a property.
    return head, int(dict(lake_table.properties()).get(LAKE_TIERED_POSITION) or 0)


def run(spark: Any, target: Target, sample_size: int = DEFAULT_SAMPLE_SIZE) -> RunResult:
    """Validate ``target`` with its table's suite and record the results."""
    run_id, started = uuid.uuid4().hex, datetime.now(timezone.utc)
    snapshot_id, lake_position = _lake_snapshot(spark, target)
    derived = derived_expectations(spark, target)
    user = user_expectations(spark, target.stream)
    outcomes = gx.run_suite(spark, _lake_frame(spark, target), derived + user, target.spec.primary_key, sample_size)
    position_ok = lake_position <= target.position
    outcomes.insert(len(derived), gx.Outcome(gx.describe(POSITION_CHECK, {"position": target.position}),
                                             position_ok, json.dumps(lake_position)))
    extra = 1
    if target.compare_stream and target.ref == "main":
        diff = lake_diff.compare(target.handle, snapshot_id, lake_position, target.kv_bases)
        outcomes.insert(len(derived) + 1, diff.outcome())
        extra += 1
    result = RunResult(run_id, outcomes)
    sources = ["derived"] * (len(derived) + extra) + ["user"] * len(user)
    rows = [dict(run_id=run_id, table_id=target.table_id, database_name=target.stream.database,
                 table_name=target.stream.table, lake_table=str(target.lake), lake_ref=target.ref,
                 lake_snapshot_id=snapshot_id, tiered_position=target.position, run_trigger=target.trigger,
                 tiering_epoch=target.epoch, run_time=started, source=source, expectation=o.expectation,
                 success=o.success, observed_value=o.observed_value, unexpected_count=o.unexpected_count,
                 unexpected_sample=o.unexpected_sample)
            for source, o in zip(sources, outcomes, strict=False)]
    SmallTable(spark, RESULTS_TABLE).append(rows)
    log.info("validated %s (%s, %s): %d of %d expectations failed", target.lake, target.ref, target.trigger,
             len(result.failures), len(outcomes))
    return result


def failure_text(result: RunResult, limit: int = 5) -> str:
    """The failing expectations, for ``last_error`` (truncated there to 2048 characters)."""
    parts = []
    for o in result.failures[:limit]:
        text = o.expectation
        if o.unexpected_count:
            text += f": {o.unexpected_count} unexpected"
        elif o.observed_value is not None:
            text += f": observed {o.observed_value}"
        if o.unexpected_sample:
            text += f", e.g. {o.unexpected_sample}"
        parts.append(text)
    more = len(result.failures) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
