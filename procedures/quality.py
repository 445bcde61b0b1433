"""Data quality of lake tables: validation runs and user expectations (docs/design.md, 'Data quality')."""

from __future__ import annotations

from typing import Any

from tierlake.server.catalog.table_path import TablePath, parse_table_path
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.config.config import Config
from tierlake.server.coordinator.registration import coordinator, registered
from tierlake.server.exceptions import InvalidArgumentError, NoSuchTableError
from tierlake.server.kv.snapshot_catalog import KvCatalog
from tierlake.server.quality import gx, lake_diff, suite
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import ADMIN, WRITER
from tierlake.server.sqlapi.types import JsonObject
from tierlake.server.state.state_table import SmallTable

RESULT_COLUMNS = [
    ("run_id", "string"), ("expectation", "string"), ("success", "boolean"), ("observed_value", "string"),
    ("unexpected_count", "bigint"), ("unexpected_sample", "string"),
]
EXPECTATION_COLUMNS = [("database_name", "string"), ("table_name", "string"), ("expectation", "string"),
                       ("kwargs", "string")]
_COLUMN_ARGS = ("column", "column_A", "column_B")


def _registered(ctx: Context, table: str):
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    _, states = coordinator(ctx).load()
    return path, registered(states, path)


def _sample_size(ctx: Context) -> int:
    return (ctx.config or Config.defaults()).int("tierlake.quality.sample-size")


@registry.procedure(returns=RESULT_COLUMNS, role=WRITER)
def validate(ctx: Context, table: str, compare: bool = True):
    """Validate a tiered table's lake table with its Great Expectations suite; one row per expectation.

    The suite is the derived checks (primary key not null and unique; for log
    tables, the lake's row count equals the stream's rows up to the tiered
    position; the lake is not ahead of the tiered position; the lake's rows
    equal what the stream implies up to the lake's tiered position,
    tierlake_lake_equals_stream) plus the table's user expectations
    (sys.add_expectation). Results are recorded in sys.lake_data_quality
    under the returned run_id.

    Args:
      table: the stream table, db.table
      compare: run tierlake_lake_equals_stream (a scan of the lake and of the stream up to the position)
    """
    path, state = _registered(ctx, table)
    lake = TablePath(state.lake_database, state.lake_table)
    if not ctx.spark.catalog.tableExists(lake.quoted):
        raise NoSuchTableError(f"lake table {lake} of {path} does not exist")
    # The table validated, loaded once: the suite and the comparison read its tables.
    handle = TableHandle(ctx.spark, path, lake, ctx.config)
    bases: tuple[lake_diff.KvBase, ...] = ()
    if compare and handle.spec.is_primary_key:
        bases = tuple(lake_diff.KvBase(s.kv_table, s.snapshot_id, s.log_position, s.stream_snapshot_id)
                      for s in KvCatalog(ctx.spark).list(path))
    target = suite.Target(state.table_id, handle, state.tiered_position or 0, compare_stream=compare,
                          kv_bases=bases)
    result = suite.run(ctx.spark, target, _sample_size(ctx))
    return [(result.run_id, o.expectation, o.success, o.observed_value, o.unexpected_count, o.unexpected_sample)
            for o in result.outcomes]


def _check_columns(ctx: Context, lake: TablePath, name: str, kwargs: dict[str, Any]) -> None:
    if not ctx.spark.catalog.tableExists(lake.quoted):
        return
    columns = {f.name.lower() for f in ctx.spark.table(lake.quoted).schema.fields}
    named = [kwargs[k] for k in _COLUMN_ARGS if isinstance(kwargs.get(k), str)]
    named += [c for c in kwargs.get("column_list") or [] if isinstance(c, str)]
    missing = [c for c in named if c.lower() not in columns]
    if missing:
        raise InvalidArgumentError(f"{name}: lake table {lake} has no column {missing[0]!r} "
                                   f"(columns: {', '.join(sorted(columns))})")


@registry.procedure(returns=EXPECTATION_COLUMNS + [("added", "boolean")], role=ADMIN)
def add_expectation(ctx: Context, table: str, expectation: str, kwargs: JsonObject | None = None):
    """Add a Great Expectations expectation to a tiered table's suite.

    The name is a GX 1.x expectation (expect_column_values_to_be_between, or
    its class name ExpectColumnValuesToBeBetween); an unknown name or bad
    arguments are an error. Adding the same expectation with the same
    arguments twice changes nothing (added = false). Used by sys.validate and
    by tiering rounds when table.datalake.quality is warn or block.

    Args:
      table: the stream table, db.table
      expectation: expectation type, e.g. expect_column_values_to_be_between
      kwargs: its arguments as a JSON object string or map(...), e.g. map('column', 'amount', 'min_value', 0)
    """
    path, state = _registered(ctx, table)
    args = dict(kwargs or {})
    gx.build(expectation, args)  # unknown names and bad arguments fail here, before anything is stored
    name, _ = gx.expectation_class(expectation)
    _check_columns(ctx, TablePath(state.lake_database, state.lake_table), name, args)
    text = suite.canonical_kwargs(args)

    def change(rows):
        for row in rows:
            if (row["database_name"], row["table_name"], row["expectation"], row["kwargs"]) == (
                    path.database, path.table, name, text):
                return False, False
        rows.append(dict(database_name=path.database, table_name=path.table, expectation=name, kwargs=text,
                         created_at=coordinator(ctx).clock(), created_by=ctx.user))
        return True, True

    added = SmallTable(ctx.spark, suite.EXPECTATIONS_TABLE).update(change)
    return [(path.database, path.table, name, text, added)]


@registry.procedure(returns=EXPECTATION_COLUMNS, role=ADMIN)
def drop_expectation(ctx: Context, table: str, expectation: str, kwargs: JsonObject | None = None):
    """Remove user expectations from a table's suite; returns the ones removed.

    Without kwargs every expectation of that type on the table is removed; with
    kwargs only the one with exactly those arguments. Removing nothing is an error.

    Args:
      table: the stream table, db.table
      expectation: expectation type, e.g. expect_column_values_to_be_between
      kwargs: only the expectation with these arguments (JSON object string or map(...)); NULL for all of that type
    """
    path = parse_table_path(table, ctx.spark.catalog.currentDatabase())
    name = gx.snake_name(expectation)
    text = None if kwargs is None else suite.canonical_kwargs(dict(kwargs))

    def change(rows):
        keep, dropped = [], []
        for row in rows:
            match = ((row["database_name"], row["table_name"], row["expectation"]) == (path.database, path.table, name)
                     and (text is None or row["kwargs"] == text))
            (dropped if match else keep).append(row)
        rows[:] = keep
        return dropped, bool(dropped)

    dropped = SmallTable(ctx.spark, suite.EXPECTATIONS_TABLE).update(change)
    if not dropped:
        what = name + ("" if text is None else f" with arguments {text}")
        raise InvalidArgumentError(f"table {path} has no expectation {what} (see sys.data_quality_expectations)")
    return [(r["database_name"], r["table_name"], r["expectation"], r["kwargs"]) for r in dropped]
