"""Run by tests/clients/test_sqlalchemy_versions.py inside a venv holding only
the client distribution, one SQLAlchemy version and pandas: what a BI host
does through ``tierlake://``, printed as JSON for the test to compare.

Usage: python sqlalchemy_probe.py <tierlake:// URL> <schema> <table>
"""

import json
import sys

import pandas as pd
import sqlalchemy as sa
from sqlalchemy import MetaData, Table, func, inspect, select, text


def main(url: str, schema: str, table: str) -> None:
    engine = sa.create_engine(url)
    insp = inspect(engine)
    out = {
        "sqlalchemy": sa.__version__,
        "schemas": sorted(insp.get_schema_names()),
        "sys_views": sorted(insp.get_view_names(schema="sys")),
        "sys_tables": sorted(insp.get_table_names(schema="sys")),
        "user_tables": sorted(insp.get_table_names(schema=schema)),
        "columns": [(c["name"], type(c["type"]).__name__) for c in insp.get_columns(table, schema=schema)],
        "has_table": [insp.has_table(table, schema=schema), insp.has_table("no_such_table", schema=schema)],
    }
    frame = pd.read_sql(f"SELECT id, region, amount FROM `{schema}`.`{table}` WHERE region LIKE 'n%' ORDER BY id",
                        engine)
    out["read_sql"] = {"columns": list(frame.columns), "ids": [int(i) for i in frame["id"]],
                       "amounts": [float(a) for a in frame["amount"]]}
    with engine.connect() as conn:
        out["read_sql_call"] = pd.read_sql(text("CALL sys.version()"), conn)["component"].tolist()
        out["read_sql_view"] = list(pd.read_sql(text("SELECT * FROM sys.lake_tiering_status"), conn).columns)
        reflected = Table(table, MetaData(), schema=schema, autoload_with=conn)
        query = (select(reflected.c.region, func.count().label("n"))
                 .group_by(reflected.c.region).order_by(reflected.c.region))
        out["core_select"] = [list(r) for r in conn.execute(query)]
    engine.dispose()
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
