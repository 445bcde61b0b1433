"""The ``tierlake://`` SQLAlchemy dialect: type mapping and URL options
(unit), then the inspector, Core and pandas against the live gateway, next to
PyHive's ``hive://`` dialect and its failures from issue 19."""

from __future__ import annotations

import datetime
import decimal
import json

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy import MetaData, Table, func, inspect, select, text
from tierlake_client.sqlalchemy_dialect import (
    SparkComplex,
    SparkDate,
    SparkDecimal,
    SparkTimestamp,
    TierlakeDialect,
    describe_columns,
    spark_type,
)

SCHEMA = "sqla_demo"


# -- unit ---------------------------------------------------------------------

def test_the_entry_point_loads_the_dialect():
    engine = sa.create_engine("tierlake://alice:secret@gateway.example:10001/sales")
    assert isinstance(engine.dialect, TierlakeDialect)
    assert engine.dialect.name == "tierlake"


@pytest.mark.parametrize("type_text, expected, attrs", [
    ("decimal(10,2)", SparkDecimal, {"precision": 10, "scale": 2}),
    ("decimal(38, 0)", SparkDecimal, {"precision": 38, "scale": 0}),
    ("timestamp", SparkTimestamp, {}),
    ("timestamp_ntz", SparkTimestamp, {}),
    ("date", SparkDate, {}),
    ("bigint", sa.BigInteger, {}),
    ("int", sa.Integer, {}),
    ("smallint", sa.SmallInteger, {}),
    ("tinyint", sa.SmallInteger, {}),
    ("double", sa.Double, {}),
    ("float", sa.Float, {}),
    ("boolean", sa.Boolean, {}),
    ("string", sa.String, {}),
    ("varchar(5)", sa.VARCHAR, {"length": 5}),
    ("char(3)", sa.CHAR, {"length": 3}),
    ("binary", sa.LargeBinary, {}),
    ("array<int>", SparkComplex, {"spark_type": "array<int>"}),
    ("map<string,int>", SparkComplex, {"spark_type": "map<string,int>"}),
    ("struct<a:int,b:array<decimal(5,1)>>", SparkComplex, {"spark_type": "struct<a:int,b:array<decimal(5,1)>>"}),
])
def test_spark_types_map_to_sqlalchemy_types(type_text, expected, attrs):
    t = spark_type(type_text)
    assert isinstance(t, expected)
    for name, value in attrs.items():
        assert getattr(t, name) == value


def test_unknown_spark_types_are_null_type_with_a_warning():
    with pytest.warns(sa.exc.SAWarning, match="interval day to second"):
        assert isinstance(spark_type("interval day to second"), sa.types.NullType)


def test_complex_types_are_strings_holding_json():
    assert isinstance(SparkComplex("array<int>"), sa.types.TypeDecorator)
    assert isinstance(SparkComplex("array<int>").impl_instance, sa.String)


def test_result_values_are_converted_from_text():
    d = TierlakeDialect()
    assert SparkDecimal(10, 2).process_result_value("1.50", d) == decimal.Decimal("1.50")
    expected = datetime.datetime(2024, 1, 2, 3, 4, 5, 500000)
    assert SparkTimestamp().process_result_value("2024-01-02 03:04:05.5", d) == expected
    assert SparkDate().process_result_value("2024-01-02", d) == datetime.date(2024, 1, 2)
    assert SparkDate().process_result_value(datetime.datetime(2024, 1, 2, 3), d) == datetime.date(2024, 1, 2)
    assert SparkDecimal(10, 2).process_result_value(None, d) is None


def test_describe_rows_end_at_the_partitioning_section():
    rows = [("id", "bigint", None), ("v", "string", "a comment"), ("", "", ""),
            ("# Partitioning", "", ""), ("Part 0", "bucket(4, id)", "")]
    assert describe_columns(rows) == [("id", "bigint", None), ("v", "string", "a comment")]
    hive_style = [("id", "int", None), ("p", "string", None), ("# Partition Information", "", ""),
                  ("# col_name", "data_type", "comment"), ("p", "string", None)]
    assert [c[0] for c in describe_columns(hive_style)] == ["id", "p"]


def test_identifiers_are_backtick_quoted_with_embedded_backticks_doubled():
    engine = sa.create_engine("tierlake://u@h/default")
    t = Table("we`ird", MetaData(), sa.Column("a.b", sa.Integer), sa.Column("select", sa.Integer), schema="s")
    sql = str(select(t).where(t.c["a.b"] > 1).compile(engine))
    assert "`s`.`we``ird`.`a.b`" in sql and "`select`" in sql and "FROM `s`.`we``ird`" in sql


@pytest.mark.parametrize("url, jdbc_url, ca_file", [
    ("tierlake://alice:pw@gw:10001/sales", "jdbc:hive2://gw:10001/sales", None),
    ("tierlake://alice@gw", "jdbc:hive2://gw:10000/default", None),
    ("tierlake://alice:pw@gw:10000/default?ssl=true&ca_file=/etc/ca.pem",
     "jdbc:hive2://gw:10000/default;ssl=true", "/etc/ca.pem"),
    ("tierlake://alice@gw/default?auth=noSasl", "jdbc:hive2://gw:10000/default;auth=noSasl", None),
    ("tierlake://alice@[::1]:10002/default", "jdbc:hive2://[::1]:10002/default", None),
])
def test_url_options_become_the_arguments_of_tierlake_sql_connect(url, jdbc_url, ca_file):
    args, kwargs = TierlakeDialect().create_connect_args(sa.engine.make_url(url))
    assert args == [] and kwargs["url"] == jdbc_url and kwargs["user"] == "alice" and kwargs["ca_file"] == ca_file


def test_unknown_url_options_are_refused():
    with pytest.raises(sa.exc.ArgumentError, match="unknown tierlake:// URL option"):
        TierlakeDialect().create_connect_args(sa.engine.make_url("tierlake://u@h/default?sslmode=require"))


def test_connect_uses_the_cli_connection_and_its_password_fallback(monkeypatch):
    import tierlake_client.jdbc as jdbc

    seen = []
    monkeypatch.setattr(jdbc, "connect", lambda **kw: seen.append(kw) or "conn")
    monkeypatch.setenv("TIERLAKE_PASSWORD", "from-env")
    d = TierlakeDialect()
    for url in ("tierlake://bob:given@gw/default?ssl=true&ca_file=/ca.pem", "tierlake://bob@gw/default"):
        _, kwargs = d.create_connect_args(sa.engine.make_url(url))
        assert d.connect(**kwargs) == "conn"
    assert seen[0] == {"url": "jdbc:hive2://gw:10000/default;ssl=true", "user": "bob", "password": "given",
                       "ca_file": "/ca.pem"}
    assert seen[1]["password"] == "from-env"


def test_plain_sql_without_parameters_is_sent_unformatted():
    class Cursor:
        def __init__(self):
            self.calls = []

        def execute(self, *args):
            self.calls.append(args)

    class Context:
        compiled = None

    cursor, d = Cursor(), TierlakeDialect()
    d.do_execute(cursor, "SELECT 'a%'", {}, Context())
    d.do_execute(cursor, "SELECT %(p)s", {"p": 1}, Context())
    compiled = Context()
    compiled.compiled = object()
    d.do_execute(cursor, "SELECT 'a%%'", {}, compiled)
    assert cursor.calls == [("SELECT 'a%'",), ("SELECT %(p)s", {"p": 1}), ("SELECT 'a%%'", {})]


# -- against the live gateway ------------------------------------------------

@pytest.fixture(scope="module")
def engine(server):
    engine = sa.create_engine(f"tierlake://tester@127.0.0.1:{server.gateway.port}/default")
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def hive_engine(server):
    engine = sa.create_engine(f"hive://tester@127.0.0.1:{server.gateway.port}/default")
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def user_schema(engine):
    """A user schema with a table of Spark's interesting types and a view,
    created through the gateway."""
    statements = [
        f"CREATE DATABASE IF NOT EXISTS {SCHEMA}",
        f"DROP VIEW IF EXISTS {SCHEMA}.big_orders",
        f"DROP TABLE IF EXISTS {SCHEMA}.orders",
        f"CREATE TABLE {SCHEMA}.orders (id BIGINT, region STRING, amount DECIMAL(10,2), placed TIMESTAMP, "
        "placed_ntz TIMESTAMP_NTZ, day DATE, tags ARRAY<INT>, attrs MAP<STRING,INT>, extra STRUCT<a:INT>) "
        "USING iceberg PARTITIONED BY (bucket(2, id))",
        f"INSERT INTO {SCHEMA}.orders VALUES "
        "(1, 'north', 10.50, timestamp'2024-01-02 03:04:05', timestamp_ntz'2024-01-02 03:04:05', date'2024-01-02', "
        " array(1, 2), map('k', 1), named_struct('a', 1)), "
        "(2, 'north', 4.25, timestamp'2024-01-03 00:00:00', timestamp_ntz'2024-01-03 00:00:00', date'2024-01-03', "
        " array(3), map('k', 2), named_struct('a', 2)), "
        "(3, 'south', 7.00, timestamp'2024-01-04 00:00:00', timestamp_ntz'2024-01-04 00:00:00', date'2024-01-04', "
        " array(), map(), named_struct('a', 3)), "
        "(4, 'east', 1.00, NULL, NULL, NULL, NULL, NULL, NULL)",
        f"CREATE VIEW {SCHEMA}.big_orders AS SELECT id, region, amount FROM {SCHEMA}.orders WHERE amount > 5",
    ]
    with engine.connect() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    return SCHEMA


def _spark_listing(spark, schema: str) -> tuple[set[str], set[str]]:
    """(tables, views) of ``schema`` as Spark's own catalog API sees them."""
    entries = spark.catalog.listTables(schema)
    views = {t.name for t in entries if t.tableType == "VIEW" and not t.isTemporary}
    return {t.name for t in entries if t.tableType != "VIEW" and not t.isTemporary}, views


def test_inspector_lists_schemas_including_sys(engine, user_schema):
    names = inspect(engine).get_schema_names()
    assert {"default", "sys", user_schema} <= set(names)


def test_inspector_lists_sys_tables_and_views_apart(engine, spark):
    inspector = inspect(engine)
    tables, views = inspector.get_table_names("sys"), inspector.get_view_names("sys")
    spark_tables, spark_views = _spark_listing(spark, "sys")
    assert set(tables) == spark_tables and len(tables) == len(spark_tables)
    assert set(views) == spark_views
    assert {"tiering_tables", "tiering_jobs", "schema_version"} <= set(tables)
    assert "lake_tiering_status" in views and "lake_tiering_status" not in tables
    assert "sys" not in tables and "sys" not in views


def test_inspector_over_a_user_schema(engine, user_schema):
    inspector = inspect(engine)
    assert inspector.get_table_names(user_schema) == ["orders"]
    assert inspector.get_view_names(user_schema) == ["big_orders"]
    assert inspector.has_table("orders", schema=user_schema)
    assert inspector.has_table("big_orders", schema=user_schema)
    assert inspector.has_table("ORDERS", schema=user_schema)  # Spark's catalog is case-insensitive
    assert not inspector.has_table("missing", schema=user_schema)
    assert not inspector.has_table("ord*", schema=user_schema)  # a name, not a SHOW TABLES pattern
    assert inspector.has_table("lake_tiering_status", schema="sys")
    assert "SELECT" in inspector.get_view_definition("big_orders", schema=user_schema).upper()


def test_get_columns_maps_spark_types(engine, user_schema):
    columns = {c["name"]: c["type"] for c in inspect(engine).get_columns("orders", schema=user_schema)}
    # The partitioning rows after DESCRIBE's blank separator are not columns.
    assert list(columns) == ["id", "region", "amount", "placed", "placed_ntz", "day", "tags", "attrs", "extra"]
    assert isinstance(columns["id"], sa.BigInteger) and isinstance(columns["region"], sa.String)
    assert isinstance(columns["amount"], SparkDecimal)
    assert (columns["amount"].precision, columns["amount"].scale) == (10, 2)
    assert isinstance(columns["placed"], SparkTimestamp) and isinstance(columns["placed_ntz"], SparkTimestamp)
    assert isinstance(columns["day"], SparkDate)
    assert [columns[c].spark_type for c in ("tags", "attrs", "extra")] == [
        "array<int>", "map<string,int>", "struct<a:int>"]
    with pytest.raises(sa.exc.NoSuchTableError):
        inspect(engine).get_columns("missing", schema=user_schema)


def test_reflected_table_reads_typed_values(engine, user_schema):
    with engine.connect() as conn:
        orders = Table("orders", MetaData(), schema=user_schema, autoload_with=conn)
        row = conn.execute(select(orders).where(orders.c.id == 1)).one()
    assert row.amount == decimal.Decimal("10.50")
    assert row.placed == datetime.datetime(2024, 1, 2, 3, 4, 5) and row.placed_ntz == row.placed
    assert row.day == datetime.date(2024, 1, 2)
    assert json.loads(row.tags) == [1, 2] and json.loads(row.attrs) == {"k": 1} and json.loads(row.extra) == {"a": 1}


def test_core_select_with_where_group_by_and_limit(engine, user_schema):
    with engine.connect() as conn:
        orders = Table("orders", MetaData(), schema=user_schema, autoload_with=conn)
        query = (select(orders.c.region, func.count().label("n"), func.sum(orders.c.amount).label("total"))
                 .where(orders.c.amount > 2)
                 .where(orders.c.region != "it's not a region")  # a quote in a bound parameter
                 .group_by(orders.c.region).order_by(orders.c.region).limit(2))
        rows = conn.execute(query).all()
    assert [tuple(r) for r in rows] == [("north", 2, decimal.Decimal("14.75")), ("south", 1, decimal.Decimal("7.00"))]


def test_a_reflected_sys_view_can_be_queried(engine):
    with engine.connect() as conn:
        status = Table("lake_tiering_status", MetaData(), schema="sys", autoload_with=conn)
        assert "status" in status.c and "table_name" in status.c
        conn.execute(select(status).limit(5)).all()


def test_pandas_reads_a_query_a_call_and_a_view(engine):
    frame = pd.read_sql("SELECT * FROM sys.lake_tiering_status", engine)
    assert list(frame.columns) == ["database_name", "table_name", "status", "tiering_epoch", "last_tiered_time",
                                   "last_error", "last_error_time"]
    with engine.connect() as conn:
        version = pd.read_sql(text("CALL sys.version()"), conn)
    assert list(version.columns) == ["component", "version"] and "tierlake" in set(version["component"])
    # A CALL as a plain string is a query too (not taken for a table name).
    assert list(pd.read_sql("CALL sys.version()", engine).columns) == ["component", "version"]
    table = pd.read_sql_table("lake_tiering_status", engine, schema="sys")
    assert list(table.columns) == list(frame.columns)


def test_pandas_reads_a_user_table_with_its_types(engine, user_schema):
    frame = pd.read_sql_table("orders", engine, schema=user_schema)
    assert sorted(frame["id"]) == [1, 2, 3, 4]
    frame = pd.read_sql(text(f"SELECT id, amount FROM {user_schema}.orders WHERE region = :r ORDER BY id"),
                        engine, params={"r": "north"})
    assert frame.to_dict("list") == {"id": [1, 2], "amount": [decimal.Decimal("10.50"), decimal.Decimal("4.25")]}


def test_a_percent_sign_is_literal_in_plain_sql_and_in_text(engine, user_schema):
    plain = pd.read_sql(f"SELECT id FROM {user_schema}.orders WHERE region LIKE 'n%' ORDER BY id", engine)
    assert list(plain["id"]) == [1, 2]
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id FROM {user_schema}.orders WHERE region LIKE 's%' AND id > :i"),
                            {"i": 0}).all()
        assert [r.id for r in rows] == [3]
        assert conn.execute(text("SELECT '100%' AS p")).scalar() == "100%"
        assert conn.exec_driver_sql("SELECT '%(x)s' AS p").scalar() == "%(x)s"


def test_the_hive_dialect_failures_of_issue_19_do_not_occur_with_tierlake(engine, hive_engine):
    query = "SELECT * FROM sys.lake_tiering_status"
    # PyHive's hive:// dialect: column 0 of Spark's SHOW TABLES is the namespace...
    hive_inspector = inspect(hive_engine)
    assert set(hive_inspector.get_table_names("sys")) == {"sys"}
    assert hive_inspector.get_view_names("sys") == hive_inspector.get_table_names("sys")
    # ...and DESCRIBE <query text> succeeds (DESCRIBE QUERY), so pandas takes
    # the query for a table name and fails to reflect it.
    assert hive_inspector.has_table(query)
    with pytest.raises(sa.exc.InvalidRequestError, match="Could not reflect: requested table"):
        pd.read_sql(query, hive_engine)

    inspector = inspect(engine)
    assert "sys" not in inspector.get_table_names("sys")
    assert "lake_tiering_status" in inspector.get_view_names("sys")
    assert not inspector.has_table(query)
    assert len(pd.read_sql(query, engine).columns) == 7


def test_hive_jdbc_sees_the_catalog_statements_the_dialect_relies_on(beeline, user_schema):
    # Nothing the dialect uses is a PyHive-only answer: Hive JDBC gets the
    # same result shapes.
    result = beeline.run(
        f"SHOW NAMESPACES;\nSHOW TABLES IN sys;\nSHOW VIEWS IN {user_schema};\n"
        f"DESCRIBE TABLE {user_schema}.orders;\nCALL sys.version();\n")
    assert result.returncode == 0, result.stderr[-3000:]
    # csv2 wraps values holding a comma in NUL characters.
    out = result.stdout.replace("\x00", "")
    assert "namespace,tableName,isTemporary" in out and "sys,lake_tiering_status,false" in out
    assert f"{user_schema},big_orders,false" in out
    assert "amount,decimal(10,2)," in out and "extra,struct<a:int>," in out
    assert "component,version" in out and "\ntierlake," in out

