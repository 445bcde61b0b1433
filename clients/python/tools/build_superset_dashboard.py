"""Rebuild the shipped Superset dashboard (maintainers only).

Against a running Superset with the tierlake engine spec installed and a
tierlake database connection (``--database-id``), creates the datasets,
charts and dashboard through Superset's REST API, exports the dashboard, and
writes the export's YAML files to ``tierlake_client/superset/dashboard/``
(the database's URI replaced by a placeholder that ``tierlake-superset
import-dashboard`` fills in). Run it from ``clients/python``:

    python tools/build_superset_dashboard.py --superset http://127.0.0.1:8088 \\
        --user admin --password admin --database-id 1
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tierlake_client.superset import dashboard

LAG_SQL = dashboard.LAG_DATASET_SQL


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--superset", default="http://127.0.0.1:8088")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default="admin")
    parser.add_argument("--database-id", type=int, required=True)
    args = parser.parse_args()
    api = dashboard.SupersetApi(args.superset, args.user, args.password)
    db = args.database_id

    def dataset(table: str, sql: str | None = None) -> int:
        body = {"database": db, "schema": "sys", "table_name": table, **({"sql": sql} if sql else {})}
        return api.call("POST", "/api/v1/dataset/", body)["id"]

    status = dataset("lake_tiering_status")
    lag_now = dataset("lake_tiering_lag")
    failures = dataset("tiering_failures", dashboard.FAILURES_DATASET_SQL)
    round_lag = dataset("tiering_round_lag", LAG_SQL)
    quality = dataset("data_quality_by_table", dashboard.QUALITY_DATASET_SQL)

    def chart(name: str, ds: int, viz: str, query: dict, width: int, height: int, **params) -> tuple:
        form = {"datasource": f"{ds}__table", "viz_type": viz, **params}
        # A saved query context lets /api/v1/chart/<id>/data (reports, the
        # tests, thumbnails) run the chart without the browser building it.
        context = {"datasource": {"id": ds, "type": "table"}, "force": False, "queries": [query],
                   "form_data": form, "result_format": "json", "result_type": "full"}
        body = {"slice_name": name, "viz_type": viz, "datasource_id": ds, "datasource_type": "table",
                "params": json.dumps(form), "query_context": json.dumps(context)}
        return api.call("POST", "/api/v1/chart/", body)["id"], width, height

    def table(name, ds, columns, width, height, *, order=None, filters=(), simple_filters=(), limit=1000):
        query = {"columns": columns, "metrics": [], "orderby": [[order, False]] if order else [],
                 "filters": [dict(f) for f in simple_filters], "row_limit": limit}
        return chart(name, ds, "table", query, width, height, query_mode="raw", all_columns=columns,
                     row_limit=limit, order_by_cols=[json.dumps([order, False])] if order else [],
                     adhoc_filters=list(filters))

    lag_metric = {"expressionType": "SIMPLE", "column": {"column_name": "lag_seconds"},
                  "aggregate": "MAX", "label": "lag_seconds"}
    charts = [
        table("Tiering status", status,
              ["database_name", "table_name", "status", "last_tiered_time", "last_error"], 6, 30),
        table("Lag now (s)", lag_now,
              ["database_name", "table_name", "lag_seconds", "freshness_seconds", "overdue", "pending_rows"], 6, 30),
        chart("Lag per table over time (s)", round_lag, "echarts_timeseries_line",
              {"columns": [{"columnType": "BASE_AXIS", "sqlExpression": "ended_at", "label": "ended_at",
                            "expressionType": "SQL", "timeGrain": "PT1M"}, "table_path"],
               "metrics": [lag_metric], "orderby": [], "filters": [], "row_limit": 10000}, 12, 50,
              x_axis="ended_at", time_grain_sqla="PT1M", groupby=["table_path"], metrics=[lag_metric],
              adhoc_filters=[{"clause": "WHERE", "subject": "ended_at", "operator": "TEMPORAL_RANGE",
                              "comparator": "No filter", "expressionType": "SIMPLE"}],
              row_limit=10000, markerEnabled=True, show_legend=True),
        # One row per tiered table (0 failed rounds, "never validated"), never "No results were returned".
        table("Failed rounds", failures,
              ["database_name", "table_name", "failed_rounds", "last_failed_at", "last_error"], 6, 30,
              order="failed_rounds", limit=1000),
        table("Data quality", quality,
              ["database_name", "table_name", "result", "last_run", "expectations", "failed_expectations",
               "failing"], 6, 30, order="failed_expectations", limit=1000),
    ]
    info = {cid: api.call("GET", f"/api/v1/chart/{cid}")["result"] for cid, _, _ in charts}
    position = dashboard.grid([(cid, str(info[cid]["uuid"]), width, height, info[cid]["slice_name"])
                               for cid, width, height in charts])
    dash = api.call("POST", "/api/v1/dashboard/", {
        "dashboard_title": "tierlake tiering", "slug": "tierlake-tiering", "published": True,
        "position_json": json.dumps(position),
        "json_metadata": json.dumps({"refresh_frequency": 60, "color_scheme": "supersetColors"})})["id"]
    for cid, _, _ in charts:
        api.call("PUT", f"/api/v1/chart/{cid}", {"dashboards": [dash]})
    blob = api.call("GET", f"/api/v1/dashboard/export/?q=!({dash})", raw=True)
    out = Path(dashboard.__file__).resolve().parent / "dashboard"
    shutil.rmtree(out, ignore_errors=True)
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        for name in z.namelist():
            relative = Path(*Path(name).parts[1:])  # drop the export's top folder
            target = out / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(dashboard.neutral(relative, z.read(name)))
    print(f"wrote {sum(1 for _ in out.rglob('*.yaml'))} files to {out}")


if __name__ == "__main__":
    main()
