"""Apache Superset 6 from PyPI, in its own venv with only ``tierlake-client``
added, against the live gateway: what an analyst does, over Superset's REST
API, then the shipped dashboard in headless Chromium.

Superset runs on loopback with SQLite metadata and CSRF on (as in
production); the test talks to it as the admin user it creates.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from tierlake_client.superset.dashboard import SupersetApi, SupersetError

from tests.browser import chromium, screenshot
from tests.clients.venvs import client_venv
from tests.conftest import ROOT, free_port, running_workers, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.superset]

DB = "superset_demo"
# Superset 6.1.0's wheel imports rich (its CLI) and cachetools (the AWS IAM
# spec, loaded with every spec) without declaring them, and admits
# Flask-Caching 2.5, whose metastore-cache arguments it cannot take.
SUPERSET = ["apache-superset>=6.1,<7", "rich", "cachetools", "flask-caching<2.4"]
SCREENSHOT = ROOT / "docs" / "images" / "superset-dashboard.png"


@pytest.fixture(scope="module")
def superset_bin():
    return client_venv("superset6", SUPERSET)


@pytest.fixture(scope="module")
def workers(server):
    yield from running_workers(server, 1)


@pytest.fixture(scope="module")
def tiered(server, workers, hive_cursor_module):
    """Three tiered tables with a few rounds each: a primary-key table with
    quality results, a log table, and a table Failed by its quality gate."""
    c = hive_cursor_module
    c.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    for t in ("orders", "clicks", "payments"):
        c.execute(f"DROP TABLE IF EXISTS {DB}.{t}")
    props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s'"
    c.execute(f"CREATE TABLE {DB}.orders (order_id BIGINT, amount DOUBLE, status STRING) "
              f"TBLPROPERTIES ({props}, 'primary-key'='order_id', 'bucket.num'='2')")
    c.execute(f"CREATE TABLE {DB}.clicks (user_id BIGINT, page STRING) TBLPROPERTIES ({props})")
    c.execute(f"CREATE TABLE {DB}.payments (payment_id BIGINT, amount DOUBLE) "
              f"TBLPROPERTIES ({props}, 'primary-key'='payment_id', 'table.datalake.quality'='block')")
    c.execute(f"CALL sys.add_expectation('{DB}.payments', 'expect_column_values_to_be_between', "
              "map('column', 'amount', 'min_value', 0, 'max_value', 10))")

    def rounds(table):
        c.execute(f"SELECT count(*) FROM sys.tiering_rounds WHERE database_name = '{DB}' AND table_name = '{table}'")
        return c.fetchone()[0]

    for batch in range(3):
        before = rounds("orders"), rounds("clicks")
        c.execute(f"INSERT INTO {DB}.orders (order_id, amount, status, _change_type) VALUES "
                  f"({batch * 2}, {batch + 1}.5, 'new', '+I'), ({batch * 2 + 1}, 2.0, 'paid', '+I')")
        c.execute(f"INSERT INTO {DB}.clicks VALUES ({batch}, 'home'), ({batch}, 'cart')")
        wait_for(lambda before=before: rounds("orders") > before[0] and rounds("clicks") > before[1], 120,
                 f"round {batch}")
        time.sleep(2)  # rounds minutes apart would be nicer; seconds show the shape
    c.execute(f"INSERT INTO {DB}.payments (payment_id, amount, _change_type) VALUES (1, 99.0, '+I')")

    def failed():
        c.execute(f"SELECT status FROM sys.lake_tiering_status WHERE database_name = '{DB}' "
                  "AND table_name = 'payments'")
        return c.fetchone()[0] == "Failed"

    wait_for(failed, 180, "payments to fail its quality gate")  # then retried after the back-off
    c.execute(f"CALL sys.validate('{DB}.orders')")
    c.fetchall()
    return DB


@pytest.fixture(scope="module")
def superset_home(tmp_path_factory):
    """Superset's home: its config, SQLite metadata and log (superset.log)."""
    return tmp_path_factory.mktemp("superset-home")


@pytest.fixture(scope="module")
def superset(superset_bin, superset_home):
    """Superset on a free loopback port: (base URL, admin password, bin dir)."""
    home = superset_home
    password = secrets.token_hex(8)
    (home / "superset_config.py").write_text(
        f"SECRET_KEY = {secrets.token_hex(24)!r}\n"
        f"SQLALCHEMY_DATABASE_URI = 'sqlite:///{home / 'superset.db'}'\n", encoding="utf-8")
    env = dict(os.environ, SUPERSET_CONFIG_PATH=str(home / "superset_config.py"), FLASK_APP="superset",
               SUPERSET_HOME=str(home))
    superset_cli = str(superset_bin / "superset")
    for args in (["db", "upgrade"],
                 ["fab", "create-admin", "--username", "admin", "--firstname", "Ada", "--lastname", "Admin",
                  "--email", "admin@example.com", "--password", password],
                 ["init"]):
        done = subprocess.run([superset_cli, *args], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"superset {args[0]}: {done.stderr[-3000:]}"
    port = free_port()
    log = open(home / "superset.log", "w")
    proc = subprocess.Popen([superset_cli, "run", "-h", "127.0.0.1", "-p", str(port), "--with-threads"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            assert proc.poll() is None, (home / "superset.log").read_text()[-3000:]
            return False

    wait_for(healthy, 180, "Superset to answer /health")
    yield base, password, superset_bin
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def api(superset):
    base, password, _ = superset
    return SupersetApi(base, "admin", password)


@pytest.fixture(scope="module")
def database(api, server, tiered):
    uri = f"tierlake://analyst:pw@127.0.0.1:{server.gateway.port}/default"
    assert api.call("POST", "/api/v1/database/test_connection/",
                    {"sqlalchemy_uri": uri, "database_name": "tierlake"}) == {"message": "OK"}
    created = api.call("POST", "/api/v1/database/",
                       {"sqlalchemy_uri": uri, "database_name": "tierlake", "expose_in_sqllab": True})
    return created["id"], uri


def lab(api, database_id, sql, schema="sys"):
    """SQL Lab's synchronous execute: (HTTP-level outcome, body)."""
    try:
        return True, api.call("POST", "/api/v1/sqllab/execute/",
                              {"database_id": database_id, "sql": sql, "runAsync": False, "schema": schema})
    except SupersetError as e:
        body = str(e).split(": ", 2)[-1]
        return False, json.loads(body[body.index("{"):])


def test_the_client_installs_beside_superset_without_the_server_stack(superset_bin):
    probe = ("import importlib.util as u, importlib.metadata as m, json, sqlalchemy, sqlglot;"
             "print(json.dumps({'missing': [n for n in ('pyspark', 'great_expectations', 'tierlake')"
             " if u.find_spec(n) is None], 'client': u.find_spec('tierlake_client') is not None,"
             " 'requires': m.requires('tierlake-client'), 'sqlalchemy': sqlalchemy.__version__,"
             " 'sqlglot': sqlglot.__version__,"
             " 'specs': [e.value for e in m.entry_points(group='superset.db_engine_specs')]}))")
    out = json.loads(subprocess.run([str(superset_bin / "python"), "-c", probe], capture_output=True,
                                    text=True, check=True).stdout)
    assert out["missing"] == ["pyspark", "great_expectations", "tierlake"]
    assert out["client"] is True
    assert not any(r.lower().startswith(("pyspark", "great-expectations", "great_expectations"))
                   for r in out["requires"])
    # Superset's own pins decided these, not the client.
    assert out["sqlalchemy"].startswith("1.4.")
    assert int(out["sqlglot"].split(".")[0]) < 29
    assert out["specs"] == ["tierlake_client.superset.engine_spec:TierlakeEngineSpec"]


def test_superset_lists_schemas_tables_and_views(api, database, tiered):
    database_id, _ = database
    assert {"sys", DB, f"{DB}_lake"} <= set(api.call("GET", f"/api/v1/database/{database_id}/schemas/")["result"])
    sys_entries = {e["value"]: e["type"] for e in
                   api.call("GET", f"/api/v1/database/{database_id}/tables/?q=(schema_name:sys)")["result"]}
    assert sys_entries["lake_tiering_status"] == "view"
    assert sys_entries["tiering_rounds"] == "view"
    assert sys_entries["tiering_tables"] == "table"
    user = {e["value"]: e["type"] for e in
            api.call("GET", f"/api/v1/database/{database_id}/tables/?q=(schema_name:{DB}_lake)")["result"]}
    assert user == {"orders": "table", "clicks": "table", "payments": "table"}
    columns = api.call("GET", f"/api/v1/database/{database_id}/table_metadata/?name=lake_tiering_lag&schema=sys")
    assert {"lag_seconds", "freshness_seconds", "pending_rows"} <= {c["name"] for c in columns["columns"]}


def test_sql_lab_runs_status_lag_aggregates_and_backticks(api, database, tiered):
    database_id, _ = database
    ok, body = lab(api, database_id, "SELECT table_name, status, last_error FROM sys.lake_tiering_status "
                   f"WHERE database_name = '{DB}' ORDER BY table_name")
    assert ok, body
    rows = {r["table_name"]: r for r in body["data"]}
    assert rows["orders"]["status"] in ("Scheduled", "Pending", "Tiering")
    # Failed, then retried after the back-off (2 s here) and Failed again: its error stays.
    assert rows["payments"]["status"] in ("Failed", "Pending", "Tiering")
    assert "expect_column_values_to_be_between" in rows["payments"]["last_error"]
    ok, body = lab(api, database_id, f"SELECT table_name, lag_seconds FROM `sys`.`lake_tiering_lag` "
                   f"WHERE `database_name` = '{DB}'")
    assert ok, body
    assert {r["table_name"] for r in body["data"]} == {"orders", "clicks", "payments"}
    ok, body = lab(api, database_id, f"SELECT status, count(*) AS n, sum(amount) AS total FROM `{DB}_lake`.`orders` "
                   "GROUP BY status ORDER BY status", schema=DB)
    assert ok, body
    assert body["data"] == [{"status": "new", "n": 3, "total": 7.5}, {"status": "paid", "n": 3, "total": 6.0}]


def test_table_preview_selects_with_backticks_and_a_limit_that_runs(api, database, tiered):
    database_id, _ = database
    star = api.call("GET", f"/api/v1/database/{database_id}/select_star/lake_tiering_status/sys/")["result"]
    assert "FROM `sys`.`lake_tiering_status`" in star and star.rstrip().endswith("LIMIT 100"), star
    assert "`default`" not in star  # no catalog part: Spark's session catalog is implied
    ok, body = lab(api, database_id, star)
    assert ok, body
    assert {r["table_name"] for r in body["data"] if r["database_name"] == DB} == {"orders", "clicks", "payments"}
    ok, body = lab(api, database_id, f"SELECT * FROM `{DB}_lake`.`clicks`", schema=DB)
    assert ok and len(body["data"]) == 6, body  # SQL Lab's own LIMIT (1000 by default) is Spark's LIMIT


def test_errors_read_as_sql_errors_not_thrift_reprs(api, database):
    database_id, _ = database
    cases = [
        ("SELECT * FROM nowhere.nothing", "TABLE_DOES_NOT_EXIST_ERROR",
         "Table or view `nowhere`.`nothing` does not exist"),
        ("SELECT no_such_column FROM sys.lake_tiering_status", "COLUMN_DOES_NOT_EXIST_ERROR",
         "Column `no_such_column` does not exist"),
        # Superset parses before it sends (sqlglot, as Spark SQL): a syntax error stops there.
        ("SELECT * FROM `sys`.lake_tiering_status WHERE", "INVALID_SQL_ERROR", "Error parsing near 'WHERE'"),
    ]
    for sql, error_type, text in cases:
        ok, body = lab(api, database_id, sql)
        assert not ok
        (error,) = body["errors"]
        assert error["error_type"] == error_type, error
        assert text in error["message"], error
        assert "TExecuteStatementResp" not in json.dumps(body) and "\tat " not in json.dumps(body)
    # What no custom error matches: the server's first line and its SQLSTATE.
    ok, body = lab(api, database_id, "SELECT array_contains(1, 2)")
    assert not ok
    (error,) = body["errors"]
    assert error["message"].startswith("tierlake error: [DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE]"), error
    assert error["message"].endswith("(SQLSTATE 42K09)") and "\n" not in error["message"], error
    # A statement that fails while running (a task's exception): its message, no Java.
    ok, body = lab(api, database_id, "SELECT raise_error('tierlake-superset-boom')")
    assert not ok
    (error,) = body["errors"]
    assert error["message"].startswith("tierlake error: tierlake-superset-boom"), error
    assert "TExecuteStatementResp" not in json.dumps(body) and "Exception" not in error["message"]


def test_a_call_that_changes_state_is_dml_and_a_read_only_call_is_not(api, database, tiered):
    database_id, _ = database
    ok, body = lab(api, database_id, f"CALL sys.kv_snapshot('{DB}.orders')")
    assert not ok
    assert body["errors"][0]["error_type"] == "DML_NOT_ALLOWED_ERROR"
    ok, body = lab(api, database_id, "/* who */ call `SYS`.`kv_snapshot`('x')")
    assert not ok and body["errors"][0]["error_type"] == "DML_NOT_ALLOWED_ERROR"
    ok, body = lab(api, database_id, "CALL sys.version()")
    assert ok, body
    assert {r["component"] for r in body["data"]} >= {"tierlake", "spark", "iceberg"}


def attempt(api, method, path, body=None):
    """(ok, JSON body) of a Superset API call that may fail."""
    try:
        return True, api.call(method, path, body)
    except SupersetError as e:
        text = str(e)
        return False, json.loads(text[text.index("{"):]) if "{" in text else {"message": text}


def test_spark_statements_that_change_state_are_dml(api, database, tiered):
    """With Allow DML off: what sqlglot does not parse as DDL/DML but changes tables, files or the classpath."""
    database_id, _ = database
    for sql in (f"LOAD DATA INPATH '/nonexistent/x' INTO TABLE {DB}_lake.clicks",
                f"ANALYZE TABLE {DB}_lake.clicks COMPUTE STATISTICS",
                f"MSCK REPAIR TABLE {DB}_lake.clicks",
                "ADD JAR /nonexistent/evil.jar",
                "CACHE TABLE superset_cached AS SELECT 1 AS a",
                f"REFRESH TABLE {DB}_lake.clicks"):
        ok, body = lab(api, database_id, sql)
        assert not ok, sql
        (error,) = body["errors"]
        assert error["error_type"] == "DML_NOT_ALLOWED_ERROR", (sql, body)
        kind = " ".join(sql.split()[:2]).replace("MSCK REPAIR", "MSCK REPAIR TABLE")
        kind = {"CACHE TABLE": "CACHE TABLE … AS SELECT", "REFRESH TABLE": "REFRESH"}.get(kind, kind)
        assert f"does not allow DML, and {kind} changes tables" in error["message"], (sql, error)


@pytest.fixture
def dml_allowed(api, database):
    """The connection with Allow DML, CTAS and CVAS on, for one test."""
    database_id, _ = database
    api.call("PUT", f"/api/v1/database/{database_id}",
             {"allow_dml": True, "allow_ctas": True, "allow_cvas": True})
    yield database_id
    api.call("PUT", f"/api/v1/database/{database_id}",
             {"allow_dml": False, "allow_ctas": False, "allow_cvas": False})


def test_statements_without_a_result_set_report_success(api, dml_allowed, tiered, hive_cursor_module):
    database_id = dml_allowed
    c = hive_cursor_module
    for name in ("superset_ctas", "superset_plain"):
        c.execute(f"DROP TABLE IF EXISTS {DB}.{name}")
    c.execute(f"DROP VIEW IF EXISTS {DB}.superset_cvas")
    query = f"SELECT status, count(*) AS n FROM `{DB}_lake`.`orders` GROUP BY status"
    for method, name in (("TABLE", "superset_ctas"), ("VIEW", "superset_cvas")):  # SQL Lab's CTAS and CVAS
        ok, body = attempt(api, "POST", "/api/v1/sqllab/execute/", {
            "database_id": database_id, "sql": query, "runAsync": False, "schema": DB, "select_as_cta": True,
            "ctas_method": method, "tmp_table_name": name})
        assert ok, (method, body)
        assert body["status"] == "success", body
        ok, body = lab(api, database_id, f"SELECT n FROM `{DB}`.`{name}` WHERE status = 'new'", schema=DB)
        assert ok and body["data"] == [{"n": 3}], (name, body)
    for sql in (f"CREATE OR REPLACE VIEW {DB}.superset_cvas AS SELECT 1 AS a",
                f"CREATE TABLE {DB}.superset_plain AS SELECT 2 AS b",
                "CACHE TABLE superset_cached AS SELECT 1 AS a",
                f"INSERT INTO {DB}.superset_plain VALUES (3)"):
        ok, body = lab(api, database_id, sql, schema=DB)
        assert ok, (sql, body)
        assert body["status"] == "success" and not body.get("data"), (sql, body)
    ok, body = lab(api, database_id, f"SELECT sum(b) AS s FROM {DB}.superset_plain", schema=DB)
    assert ok and body["data"] == [{"s": 5}], body


def test_a_failed_connection_test_names_its_cause(api, server):
    port = server.gateway.port
    cases = [
        (f"tierlake://analyst:pw@127.0.0.1:{free_port()}/default", "nothing is listening there"),
        (f"tierlake://analyst:pw@127.0.0.1:{port}/default?ssl=true", "does not speak TLS"),
        (f"tierlake://analyst:pw@127.0.0.1:{port}/default?auth=noSasl", "auth=noSasl sends no password"),
    ]
    for uri, cause in cases:
        ok, body = attempt(api, "POST", "/api/v1/database/test_connection/",
                           {"sqlalchemy_uri": uri, "database_name": "tierlake-test"})
        assert not ok, uri
        text = json.dumps(body)
        assert cause in text, (uri, body)
        assert "builtins.NoneType" not in text, (uri, body)


def test_a_table_preview_reads_view_text_without_show_create_view(api, database, server, tiered):
    database_id, _ = database
    spark_log = server.config.logs_dir / "spark.log"

    def mentions() -> int:
        return spark_log.read_text(encoding="utf-8", errors="replace").count("SHOW CREATE VIEW") \
            if spark_log.exists() else 0

    before = mentions()
    view = api.call("GET", f"/api/v1/database/{database_id}/table_metadata/extra/?name=lake_tiering_status"
                           "&schema=sys")
    assert "CREATE VIEW" in view["view"] and "lake_tiering_status" in view["view"], view
    table = api.call("GET", f"/api/v1/database/{database_id}/table_metadata/extra/?name=tiering_tables&schema=sys")
    assert table.get("view") is None, table
    api.call("GET", f"/api/v1/database/{database_id}/table_metadata/?name=lake_tiering_status&schema=sys")
    assert mentions() == before


def test_file_upload_is_not_offered(api, database, server, superset_home):
    """Superset's Hive upload needs S3 (boto3): the spec says it has no upload, so the database form
    offers no "Allow file uploads" and the upload menu lists no tierlake database.

    Superset 6.1's ``schemas_access_for_file_upload`` answers 500 for every database an admin may
    access, whatever its engine spec: the endpoint hands Flask's JSON encoder the Python ``set``
    that ``Database.get_schema_access_for_file_upload`` and
    ``security_manager.get_schemas_accessible_by_user`` return, which it refuses ("Object of type set
    is not JSON serializable"); the only spec method on that path, ``get_default_catalog``, answers.
    Superset's upload form calls it only for a database that allows uploads, which a tierlake one
    cannot. Shown here beside a database of Superset's own Hive spec; when Superset fixes it, this
    test says so (and docs/clients.md's note goes)."""
    database_id, _ = database
    info = api.call("GET", f"/api/v1/database/{database_id}")["result"]
    assert info["engine_information"]["supports_file_upload"] is False
    assert info["allow_file_upload"] is False
    uploadable = api.call("GET", "/api/v1/database/?q=(filters:!((col:allow_file_upload,opr:upload_is_enabled,"
                                 "value:!t)))")["result"]
    assert database_id not in {d["id"] for d in uploadable}
    hive = api.call("POST", "/api/v1/database/", {
        "sqlalchemy_uri": f"hive://analyst@127.0.0.1:{server.gateway.port}/default",
        "database_name": "hive-control"})["id"]
    try:
        log = superset_home / "superset.log"
        for db in (database_id, hive):
            before = len(log.read_text(encoding="utf-8", errors="replace"))
            with pytest.raises(SupersetError, match="HTTP 500"):
                api.call("GET", f"/api/v1/database/{db}/schemas_access_for_file_upload/")
            # Superset's @safe answers "Fatal error" and logs the traceback: raised in its own endpoint.
            trace = wait_for(lambda before=before: (lambda t: t if "not JSON serializable" in t else "")(
                log.read_text(encoding="utf-8", errors="replace")[before:]), 10, "the traceback in superset.log", 0.2)
            print(trace)
            assert "TypeError: Object of type set is not JSON serializable" in trace, trace[-3000:]
            assert "in schemas_access_for_file_upload" in trace and "superset/databases/api.py" in trace, trace
            assert "tierlake_client" not in trace, trace
    finally:
        api.call("DELETE", f"/api/v1/database/{hive}")


def test_a_dataset_on_the_status_view_and_a_lag_time_series_through_the_chart_data_api(api, database, tiered):
    database_id, _ = database
    status = api.call("POST", "/api/v1/dataset/",
                      {"database": database_id, "schema": "sys", "table_name": "lake_tiering_status"})["id"]
    by_status = api.call("POST", "/api/v1/chart/data", {
        "datasource": {"id": status, "type": "table"}, "force": True,
        "queries": [{"columns": ["status"], "metrics": ["count"], "orderby": [], "row_limit": 100,
                     "filters": [{"col": "database_name", "op": "==", "val": DB}]}],
        "form_data": {"viz_type": "table", "datasource": f"{status}__table"},
        "result_format": "json", "result_type": "full"})
    counts = {r["status"]: r["count"] for r in by_status["result"][0]["data"]}
    assert sum(counts.values()) == 3 and set(counts) <= {"Scheduled", "Pending", "Tiering", "Failed"}
    # One catalog, the one Spark names: the dataset's is the one the catalog list shows.
    assert api.call("GET", f"/api/v1/database/{database_id}/catalogs/")["result"] == ["spark_catalog"]
    assert api.call("GET", f"/api/v1/dataset/{status}")["result"]["catalog"] == "spark_catalog"

    from tierlake_client.superset.dashboard import LAG_DATASET_SQL

    lag = api.call("POST", "/api/v1/dataset/", {"database": database_id, "schema": "sys",
                                                "table_name": "round_lag_test", "sql": LAG_DATASET_SQL})["id"]
    series = api.call("POST", "/api/v1/chart/data", {
        "datasource": {"id": lag, "type": "table"}, "force": True,
        "queries": [{"columns": [{"columnType": "BASE_AXIS", "sqlExpression": "ended_at", "label": "ended_at",
                                  "expressionType": "SQL", "timeGrain": "PT1M"}, "table_path"],
                     "metrics": [{"expressionType": "SIMPLE", "column": {"column_name": "lag_seconds"},
                                  "aggregate": "MAX", "label": "lag_seconds"}],
                     "filters": [{"col": "table_path", "op": "IN", "val": [f"{DB}.orders", f"{DB}.clicks"]}],
                     "orderby": [], "row_limit": 1000}],
        "form_data": {"viz_type": "echarts_timeseries_line", "datasource": f"{lag}__table"},
        "result_format": "json", "result_type": "full"})["result"][0]
    assert "date_trunc('minute'" in series["query"]  # Spark's time grain, not "no grain spec"
    points = [r for r in series["data"] if r["lag_seconds"] is not None]
    assert {r["table_path"] for r in points} == {f"{DB}.orders", f"{DB}.clicks"}
    assert all(r["lag_seconds"] >= 0 and isinstance(r["ended_at"], (int, float)) for r in points)


def test_the_shipped_dashboard_imports_with_one_command_and_its_charts_answer(superset, api, database, tiered):
    base, password, superset_bin = superset
    _, uri = database
    done = subprocess.run([str(superset_bin / "tierlake-superset"), "import-dashboard", "--superset", base,
                           "--superset-user", "admin", "--database-uri", uri],
                          env=dict(os.environ, SUPERSET_PASSWORD=password), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "imported the 'tierlake tiering' dashboard" in done.stdout
    # Attached to the connection made above, not a second "tierlake".
    assert [d["database_name"] for d in api.call("GET", "/api/v1/database/")["result"]] == ["tierlake"]
    charts = {c["slice_name"]: c["id"] for c in
              api.call("GET", "/api/v1/dashboard/tierlake-tiering/charts")["result"]}
    assert set(charts) == {"Tiering status", "Lag now (s)", "Lag per table over time (s)", "Failed rounds",
                           "Data quality"}
    data = {name: api.call("GET", f"/api/v1/chart/{cid}/data/")["result"][0]["data"] for name, cid in charts.items()}
    assert any(r["table_name"] == "payments" and "expect_column_values_to_be_between" in (r["last_error"] or "")
               for r in data["Tiering status"] if r["database_name"] == DB)
    assert {r["table_name"] for r in data["Lag now (s)"] if r["database_name"] == DB} == {
        "orders", "clicks", "payments"}
    assert any(r["table_path"] == f"{DB}.orders" and r["lag_seconds"] is not None
               for r in data["Lag per table over time (s)"])
    # Every tiered table has a row, with a value when all is well (never "No results were returned").
    failed = {r["table_name"]: r for r in data["Failed rounds"] if r["database_name"] == DB}
    assert set(failed) == {"orders", "clicks", "payments"}, data["Failed rounds"]
    assert failed["orders"]["failed_rounds"] == 0 and failed["clicks"]["failed_rounds"] == 0, failed
    assert failed["payments"]["failed_rounds"] >= 1, failed
    assert "expect_column_values_to_be_between" in failed["payments"]["last_error"], failed
    quality = {r["table_name"]: r for r in data["Data quality"] if r["database_name"] == DB}
    assert quality["orders"]["result"] == "passed" and quality["orders"]["expectations"] > 0, quality
    assert quality["orders"]["failed_expectations"] == 0, quality
    assert quality["clicks"]["result"] == "never validated" and quality["clicks"]["expectations"] == 0, quality
    assert quality["payments"]["result"] == "failed", quality
    assert "expect_column_values_to_be_between" in quality["payments"]["failing"], quality
    wrong = subprocess.run([str(superset_bin / "tierlake-superset"), "import-dashboard", "--superset", base,
                            "--superset-user", "admin", "--database-uri", uri],
                           env=dict(os.environ, SUPERSET_PASSWORD="wrong"), capture_output=True, text=True,
                           timeout=300)
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stderr


def test_the_dashboard_renders_with_data_in_chromium(superset, tiered, tmp_path):
    base, password, _ = superset
    from selenium.webdriver.common.by import By

    driver = chromium(1600, 1500)
    try:
        driver.get(base + "/login/")
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "input#username"), 60, "the login form")
        driver.find_element(By.CSS_SELECTOR, "input#username").send_keys("admin")
        driver.find_element(By.CSS_SELECTOR, "input#password").send_keys(password + "\n")
        wait_for(lambda: "/login" not in driver.current_url, 60, "the login to finish")
        driver.get(base + "/superset/dashboard/tierlake-tiering/")

        def rendered():
            text = driver.find_element(By.TAG_NAME, "body").text
            canvases = driver.find_elements(By.CSS_SELECTOR, ".dashboard-chart canvas, .dashboard-chart svg path")
            return "payments" in text and "expect_column_values_to_be_between" in text and canvases and \
                not driver.find_elements(By.CSS_SELECTOR, ".loading")

        wait_for(rendered, 120, "the dashboard's charts to draw")
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "Unexpected error" not in body and "No results were returned" not in body, body
        assert "never validated" in body, body  # the Data quality panel's row for the log table
        screenshot(driver, tmp_path / "dashboard.png", SCREENSHOT, 20_000)
    finally:
        driver.quit()


def test_the_docs_screenshot_is_the_shipped_dashboard():
    assert SCREENSHOT.exists() and SCREENSHOT.stat().st_size > 20_000
    assert Path("images/superset-dashboard.png").as_posix() in (ROOT / "docs" / "clients.md").read_text()
