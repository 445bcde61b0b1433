"""The SQL files: they parse, split, and the views have the promised shape."""

import sqlglot
from sqlglot import exp

from tierlake import sql
from tierlake.server.runtime.jvm_errors import SimulatedJavaError
from tierlake.server.state import migrations

# What Spark's analysis raises for an ADD COLUMNS that ran before (the error class decides).
FIELDS_EXIST = SimulatedJavaError("org.apache.spark.sql.AnalysisException", error_class="FIELDS_ALREADY_EXISTS",
                                  message="[FIELDS_ALREADY_EXISTS] Cannot add column, because `phase` already exists")


def test_identifiers_are_quoted_safely():
    assert sql.quote_ident("orders") == "`orders`"
    assert sql.quote_ident("we`ird; DROP") == "`we``ird; DROP`"
    assert sql.quote_table("shop", "orders") == "`shop`.`orders`"


def test_split_respects_strings_and_comments():
    text = "-- a; b\nCREATE TABLE t (a STRING COMMENT 'x;y');\n/* ; */ SELECT 1;\n-- end\n"
    assert sql.split_statements(text) == [
        "-- a; b\nCREATE TABLE t (a STRING COMMENT 'x;y')",
        "/* ; */ SELECT 1",
    ]


def test_migrations_are_numbered_and_parse():
    found = migrations.available()
    assert [m.version for m in found] == sorted({m.version for m in found})
    assert found[0].version == 1
    for m in found:
        for statement in m.statements:
            tree = sqlglot.parse_one(statement, read="spark")
            # Idempotent: re-running a migration must never fail or destroy data.
            assert not isinstance(tree, (exp.Drop, exp.TruncateTable, exp.Delete)), statement
            if isinstance(tree, exp.Create):
                assert tree.args.get("exists"), f"CREATE without IF NOT EXISTS: {statement}"
            if isinstance(tree, exp.Alter):
                # Only ADD COLUMNS, which the runner re-runs harmlessly.
                assert migrations.already_added(statement, FIELDS_EXIST), statement


def test_a_rerun_add_columns_counts_as_done_and_nothing_else_does():
    add = "-- why\nALTER TABLE sys.t ADD COLUMNS (\n  phase STRING COMMENT 'x'\n)"
    exists = FIELDS_EXIST
    assert migrations.already_added(add, exists)
    assert not migrations.already_added(add, SimulatedJavaError("org.apache.spark.sql.AnalysisException",
                                                                 error_class="TABLE_OR_VIEW_NOT_FOUND"))
    # Spark's error class decides, not a text that happens to name it.
    assert not migrations.already_added(add, Exception("[FIELDS_ALREADY_EXISTS] Cannot add column"))
    assert not migrations.already_added("CREATE TABLE IF NOT EXISTS sys.t (a INT)", exists)
    assert not migrations.already_added("ALTER TABLE sys.t DROP COLUMN phase", exists)


def test_status_view_has_exactly_the_seed_columns():
    (statement,) = sql.split_statements(sql.read("views/lake_tiering_status.sql"))
    tree = sqlglot.parse_one(statement, read="spark")
    select = tree.find(exp.Select)
    columns = [(e.alias, e.this.to.sql("spark")) for e in select.expressions]
    assert columns == [
        ("database_name", "STRING"),
        ("table_name", "STRING"),
        ("status", "STRING"),
        ("tiering_epoch", "BIGINT"),
        ("last_tiered_time", "TIMESTAMP"),
        ("last_error", "STRING"),
        ("last_error_time", "TIMESTAMP"),
    ]


def test_data_quality_view_has_the_promised_columns():
    (statement,) = sql.split_statements(sql.read("views/lake_data_quality.sql"))
    select = sqlglot.parse_one(statement, read="spark").find(exp.Select)
    columns = [(e.alias, e.this.to.sql("spark")) for e in select.expressions]
    assert columns == [
        ("database_name", "STRING"),
        ("table_name", "STRING"),
        ("run_id", "STRING"),
        ("run_time", "TIMESTAMP"),
        ("expectation", "STRING"),
        ("success", "BOOLEAN"),
        ("observed_value", "STRING"),
        ("unexpected_count", "BIGINT"),
        ("unexpected_sample", "STRING"),
    ]


def test_views_use_no_python_udfs():
    for path in sql.files("views"):
        for statement in sql.split_statements(path.read_text()):
            tree = sqlglot.parse_one(statement, read="spark")
            anonymous = [f.name for f in tree.find_all(exp.Anonymous)]
            assert not anonymous, f"{path.name} calls unknown functions {anonymous}"


def test_lag_view_knows_the_duration_units_the_server_parses():
    """``sys.lake_tiering_lag`` converts freshness in SQL (the view must stay
    free of Python UDFs); its unit table must agree with ``parse_duration``."""
    from tierlake.server.config import durations

    view = sqlglot.parse_one(sql.read("views/lake_tiering_lag.sql"), read="spark")
    in_view: dict[str, float] = {}
    for case in view.find_all(exp.Case):
        for branch in case.args["ifs"]:
            units = branch.this
            if isinstance(units, exp.In) and units.this.name == "unit":
                for unit in units.expressions:
                    in_view[unit.name] = float(branch.args["true"].name)
    assert in_view == {unit: float(factor) for unit, factor in durations._UNITS.items()}
