"""Table procedures: creating tiered tables."""

from __future__ import annotations

from tierlake.server.catalog.properties import ENABLED, validate
from tierlake.server.catalog.table_path import parse_table_path
from tierlake.server.exceptions import InvalidArgumentError
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import ADMIN
from tierlake.server.tiering.ctas import RESULT_COLUMNS
from tierlake.server.tiering.ctas import create_table_as as run_create_table_as


@registry.procedure(returns=RESULT_COLUMNS, role=ADMIN)
def create_table_as(ctx: Context, table: str, query: str, properties: dict[str, str] | None = None,
                    if_not_exists: bool = False):
    """Create a tiered table from a query, atomically (the CALL form of
    CREATE TABLE … TBLPROPERTIES ('table.datalake.enabled'='true') AS SELECT).

    The stream table, the lake table (<db>_lake.<table>), their data and the
    coordinator registration appear together, or, if the query fails or the
    client cancels, nothing does. The lake table already holds the query's
    rows: the first tiering round only carries what is written afterwards.
    A server stopped mid-way rolls the statement back at its next start
    (see sys.create_table_as_log).

    Args:
      table: the stream table to create, db.table
      query: one SELECT statement (WITH and set operations allowed)
      properties: table properties, as in CREATE TABLE (primary-key, bucket.num,
          table.datalake.freshness, ...); table.datalake.enabled is implied
      if_not_exists: when the table exists, do nothing instead of failing
    """
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    validate({ENABLED: props.setdefault(ENABLED, "true")})  # 'true' or 'false'; the rest is checked by the engine
    if props[ENABLED].strip().lower() != "true":
        raise InvalidArgumentError(f"sys.create_table_as creates tiered tables; {ENABLED} cannot be {props[ENABLED]!r}")
    return run_create_table_as(ctx, parse_table_path(table), query, props, if_not_exists)
