"""Creating tiered tables: the stream table and its lake table (server/tiering/ddl.py makes them, with the
registration and the fresh view, as the undoable steps of one statement)."""

from __future__ import annotations

import logging
from typing import Any

from tierlake import sql
from tierlake.server.catalog import field_ids
from tierlake.server.catalog.columns import columns_of
from tierlake.server.catalog.properties import ENABLED, FORMAT_VERSION, LAKE_TABLE_PROPERTY
from tierlake.server.catalog.spec import CHANGE_TYPE, Column, TieredSpec, data_columns, partition_sql
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.config.config import Config
from tierlake.server.exceptions import InvalidArgumentError, TierlakeError
from tierlake.server.runtime.iceberg_actions import METADATA_PROPERTIES

log = logging.getLogger("tierlake.tables")

T_CREATE_STREAM = "templates/create_stream_table.sql.j2"
T_CREATE_LAKE = "templates/create_lake_table.sql.j2"
T_CREATE_DATABASE = "templates/create_database.sql.j2"
T_DROP_TABLE = "templates/drop_table.sql.j2"
T_DROP_DATABASE = "templates/drop_database.sql.j2"
T_COUNT_NULL_KEYS = "templates/count_null_keys.sql.j2"


def suffixed_path(config: Config | None, stream: TablePath, setting: str) -> TablePath:
    """``<db><suffix>.<table>``, the suffix read from ``setting`` (the lake's, the fresh view's)."""
    suffix = (config or Config.defaults()).text(setting)
    return TablePath(stream.database + suffix, stream.table)


def lake_path(config: Config | None, stream: TablePath) -> TablePath:
    """Where the lake table of ``stream`` lives: ``<db><tierlake.lake.database-suffix>.<table>``."""
    return suffixed_path(config, stream, "tierlake.lake.database-suffix")


def lake_of(config: Any, stream: TablePath, properties: dict[str, str]) -> TablePath:
    """The lake table of a tiered ``stream``: the one it was registered with
    (its ``tierlake.lake-table`` property); a stream without one gets :func:`lake_path`."""
    name = properties.get(LAKE_TABLE_PROPERTY)
    return TablePath(*name.split(".", 1)) if name else lake_path(config, stream)


def create_lake_table(spark: Any, stream: TablePath, lake: TablePath, columns: list[Column], spec: TieredSpec,
                      *, at: TablePath | None = None, location: str | None = None, tables: Any = None) -> None:
    """The lake table of ``stream``; ``at`` creates it under another (staged) name. ``tables``: the
    stream and the lake as the caller loads them (a tiered table's handle: ``stream_table`` and
    ``lake_table``, the lake loaded once it exists)."""
    partition = [partition_sql(t) for t in spec.lake_partition]
    if spec.is_primary_key:
        partition.append(f"bucket({spec.buckets}, {sql.quote_ident(spec.primary_key[0])})")
    name = at or lake
    spark.sql(sql.render(T_CREATE_DATABASE, database=name.database))
    spark.sql(sql.render_checked(T_CREATE_LAKE, table=[name.database, name.table], columns=data_columns(columns),
                         partition=partition, spec=spec, stream=str(stream), location=location))
    # Which stream field each lake column carries: a later RENAME COLUMN on the stream follows it.
    field_ids.record(spark, stream, name, [c.name for c in data_columns(columns)], tables)


# Another application's commit to a stream table (Spark with Hive locks, a
# streaming job) competes with the server's group commits, several a second
# under load: an attempt loses if a group lands between its refresh and its
# compare-and-set. The embedded metastore then holds the server's commits of
# that table back until the retry lands (StreamIngest.java); Iceberg reads the
# retry count from the table, and this gives every writer a few more turns.
STREAM_COMMIT_PROPERTIES = {"commit.retry.num-retries": "10"}


def stream_properties(properties: dict[str, str], lake: TablePath) -> dict[str, str]:
    props = dict(properties)
    props.setdefault(FORMAT_VERSION, "2")
    for key, value in METADATA_PROPERTIES.items():  # users' one-row INSERTs leave no metadata.json each
        props.setdefault(key, value)
    for key, value in STREAM_COMMIT_PROPERTIES.items():
        props.setdefault(key, value)
    props[LAKE_TABLE_PROPERTY] = str(lake)
    return props


def create_stream_table(spark: Any, name: TablePath, columns: list[Column], spec: TieredSpec,
                        properties: dict[str, str], location: str | None = None) -> None:
    if any(c.name.lower() == CHANGE_TYPE for c in columns):
        raise InvalidArgumentError(f"column {CHANGE_TYPE} is added by tierlake; do not declare it")
    spark.sql(sql.render_checked(T_CREATE_STREAM, table=[name.database, name.table], columns=columns, spec=spec,
                         change_type=CHANGE_TYPE, properties=properties, location=location))


def prepare_existing(spark: Any, config: Any, stream: TablePath) -> TablePath:
    """``sys.enable_tiering`` on an existing Iceberg table: mark it, add the
    change-type column to primary-key tables, create the lake table."""
    table = load_table(spark, stream)
    props = {str(k): str(v) for k, v in dict(table.properties()).items()}
    schema = spark.table(stream.quoted).schema
    columns = columns_of(schema)
    spec = TieredSpec.from_properties(props, columns)  # checks every property before anything changes
    nullable = [f.name for f in schema.fields if f.name.lower() in spec.primary_key and f.nullable]
    if nullable:
        refuse_null_keys(spark, stream, spec.primary_key)
    lake = lake_of(config, stream, props)
    update = table.updateProperties().set(ENABLED, "true").set(LAKE_TABLE_PROPERTY, str(lake))
    update.commit()
    if nullable:
        require_columns(spark, stream, nullable)
    if spec.is_primary_key and not any(c.name.lower() == CHANGE_TYPE for c in columns):
        jvm = spark.sparkContext._jvm
        load_table(spark, stream).updateSchema().addColumn(
            CHANGE_TYPE, jvm.org.apache.iceberg.types.Types.StringType.get()).commit()
    if not spark.catalog.tableExists(lake.quoted):
        try:
            create_lake_table(spark, stream, lake, columns, spec)
        except TierlakeError:
            raise
        except Exception as e:
            raise InvalidArgumentError(f"cannot create lake table {lake}: {e}") from e
    return lake


def refuse_null_keys(spark: Any, stream: TablePath, keys: list[str]) -> None:
    """A primary-key table with NULL keys cannot be tiered: a NULL key matches
    no lake row, so every upsert of it would add a row and a delete would do nothing."""
    count = spark.sql(sql.render_checked(T_COUNT_NULL_KEYS, table=[stream.database, stream.table],
                                         keys=keys)).collect()[0]["null_keys"]
    if count:
        raise InvalidArgumentError(
            f"table {stream} has {count} row(s) with a NULL in its primary key ({', '.join(keys)}); "
            "delete or fix them, then enable tiering again")


def require_columns(spark: Any, stream: TablePath, names: list[str]) -> None:
    """Make the (checked, NULL-free) key columns NOT NULL, so writers cannot add a NULL key.

    Spark's ``ALTER COLUMN … SET NOT NULL`` and Iceberg's ``requireColumn``
    both refuse optional → required, because Iceberg cannot know the data has
    no NULLs; :func:`refuse_null_keys` has just counted them, so the change is
    allowed explicitly. A writer that committed a NULL key between that count
    and this commit is not seen here (the round's NULL-key check catches it).
    """
    update = load_table(spark, stream).updateSchema().allowIncompatibleChanges()
    for name in names:
        update = update.requireColumn(name)
    update.commit()
