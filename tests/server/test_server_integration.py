"""The foundation through the gateway, with real PyHive and real beeline."""

from __future__ import annotations

import threading

import pytest
from pyhive import exc

pytestmark = pytest.mark.integration

SYS_TABLES = {"schema_version", "tiering_tables", "procedure_catalog", "tiering_jobs", "tiering_round_log",
              "quality_expectations", "quality_results"}
SYS_VIEWS = {"lake_tiering_status", "procedures", "tiering_rounds", "tiering_job_status", "lake_data_quality",
             "data_quality_expectations"}


def _error(cursor, statement):
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    return status.errorMessage, status.sqlState


def _alive(cursor):
    cursor.execute("SELECT 1 + 1")
    assert cursor.fetchall() == [(2,)]


def test_show_tables_in_sys_lists_state_tables_and_views(hive_cursor):
    hive_cursor.execute("SHOW TABLES IN sys")
    names = {row[1] for row in hive_cursor.fetchall()}
    assert SYS_TABLES | SYS_VIEWS <= names


def test_status_view_has_the_seed_columns_and_types(hive_cursor):
    # Other tests in this process register tables; a filter keeps this one
    # independent of their order while still describing the empty result.
    hive_cursor.execute("SELECT * FROM sys.lake_tiering_status WHERE database_name = 'no_such_db'")
    assert hive_cursor.fetchall() == []
    assert [(d[0], d[1]) for d in hive_cursor.description] == [
        ("database_name", "STRING_TYPE"),
        ("table_name", "STRING_TYPE"),
        ("status", "STRING_TYPE"),
        ("tiering_epoch", "BIGINT_TYPE"),
        ("last_tiered_time", "TIMESTAMP_TYPE"),
        ("last_error", "STRING_TYPE"),
        ("last_error_time", "TIMESTAMP_TYPE"),
    ]


def test_call_version_returns_rows(hive_cursor, spark):
    hive_cursor.execute("CALL sys.version()")
    assert [d[0] for d in hive_cursor.description] == ["component", "version"]
    rows = dict(hive_cursor.fetchall())
    assert rows["spark"] == spark.version
    assert rows["iceberg"].startswith("1.10")
    assert int(rows["schema"]) >= 1
    assert rows["tierlake"]


def test_sys_procedures_lists_every_registered_procedure(hive_cursor, server):
    hive_cursor.execute("SELECT name, signature, description FROM sys.procedures ORDER BY name")
    listed = {row[0]: row for row in hive_cursor.fetchall()}
    assert set(listed) == {p.qualified_name for p in server.registry}
    assert listed["sys.version"][1] == "sys.version()"
    assert listed["sys.describe_procedure"][1] == "sys.describe_procedure(name STRING)"
    assert "Versions of tierlake" in listed["sys.version"][2]


def test_named_arguments_through_the_gateway(hive_cursor):
    hive_cursor.execute("CALL sys.describe_procedure(name => 'sys.version')")
    ((name, signature, returns, doc),) = hive_cursor.fetchall()
    assert (name, signature, returns) == ("sys.version", "sys.version()", "component STRING, version STRING")


def test_getTables_metadata_call_lists_sys_objects(server):
    from pyhive import hive
    from TCLIService import ttypes

    conn = hive.connect("127.0.0.1", server.gateway.port, username="meta")
    try:
        req = ttypes.TGetTablesReq(sessionHandle=conn._sessionHandle, schemaName="sys", tableName="%")
        resp = conn.client.GetTables(req)
        assert resp.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
        fetch = conn.client.FetchResults(
            ttypes.TFetchResultsReq(operationHandle=resp.operationHandle, orientation=0, maxRows=1000)
        )
        names = set(fetch.results.columns[2].stringVal.values)
        assert SYS_TABLES | SYS_VIEWS <= names
    finally:
        conn.close()


@pytest.mark.parametrize(
    "statement,fragments,state",
    [
        ("CALL sys.verison()", ["unknown procedure sys.verison", "did you mean sys.version"], "42883"),
        ("CALL sys.version(extra => 1)", ["sys.version has no parameter 'extra'"], "22023"),
        ("CALL sys.describe_procedure()", ["missing required parameter 'name'"], "22023"),
        ("CALL sys.describe_procedure(nme => 'x')", ["no parameter 'nme'; did you mean 'name'?"], "22023"),
        ("CALL sys.describe_procedure(name => 42)", ["parameter 'name': expected STRING, got BIGINT 42"], "22023"),
        ("CALL sys.describe_procedure(name => 'version'", ["not closed with ')'"], "42601"),
        ("CALL sys.describe_procedure(name => upper('x'))", ["only literals"], "42601"),
    ],
)
def test_bad_calls_are_sql_errors_on_a_usable_connection(hive_cursor, statement, fragments, state):
    message, sqlstate = _error(hive_cursor, statement)
    for fragment in fragments:
        assert fragment in message
    assert sqlstate == state
    _alive(hive_cursor)


def test_injection_in_a_string_argument_has_no_effect(hive_cursor, spark):
    before = spark.sql("SELECT count(*) FROM sys.schema_version").collect()[0][0]
    message, state = _error(
        hive_cursor,
        "CALL sys.describe_procedure(name => 'x''); DROP TABLE sys.schema_version; --')",
    )
    # A doubled quote is no escape in Spark SQL: refused, saying so (docs/procedures.md).
    assert "'' inside a string literal is not an escape" in message and state == "42601"
    message, _ = _error(
        hive_cursor, "CALL sys.describe_procedure(name => 'x'); DROP TABLE sys.schema_version; --')"
    )
    assert "cannot parse" in message
    assert spark.catalog.tableExists("sys.schema_version")
    assert spark.sql("SELECT count(*) FROM sys.schema_version").collect()[0][0] == before
    _alive(hive_cursor)


def test_relayed_sql_errors_keep_the_connection(hive_cursor):
    message, _ = _error(hive_cursor, "SELECT * FROM no_such_db.no_such_table")
    assert "no_such_table" in message
    _alive(hive_cursor)


def test_beeline_lists_queries_and_calls(beeline):
    result = beeline.run(
        "SHOW TABLES IN sys;\n!tables\n"
        "SELECT * FROM sys.lake_tiering_status;\nCALL sys.version();\n"
        "SELECT name FROM sys.procedures ORDER BY name;\n"
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    for name in SYS_TABLES | SYS_VIEWS:
        assert name in out
    # !tables prints the JDBC metadata columns (TABLE_CAT, TABLE_SCHEM, TABLE_NAME, ...)
    assert "TABLE_SCHEM" in out or "table_schem" in out.lower()
    assert "database_name,table_name,status,tiering_epoch,last_tiered_time,last_error,last_error_time" in out
    assert "component,version" in out and "iceberg,1.10" in out
    assert "sys.version" in out


def test_beeline_sees_a_call_error_with_sqlstate(beeline):
    result = beeline.run("CALL sys.verison();\nSELECT 'still here';\n", timeout=120)
    combined = result.stdout + result.stderr
    assert "unknown procedure sys.verison; did you mean sys.version" in combined
    assert "state=42883" in combined and "code=2002" in combined


def test_beeline_nosasl_url_is_refused_by_a_sasl_gateway_with_an_error(beeline):
    # Default auth is SASL PLAIN; a client asking for noSasl must not hang.
    result = beeline.run("SELECT 1;", url_options=";auth=noSasl", timeout=60)
    assert result.returncode != 0


def test_16_concurrent_clients_25_mixed_statements_each(server):
    from pyhive import hive

    failures: list[str] = []
    done = []

    def client(n: int) -> None:
        try:
            conn = hive.connect("127.0.0.1", server.gateway.port, username=f"client{n}")
            cur = conn.cursor()
            for i in range(25):
                kind = i % 5
                if kind == 0:
                    cur.execute("CALL sys.version()")
                    assert len(cur.fetchall()) == 4
                elif kind == 1:
                    cur.execute("SELECT * FROM sys.lake_tiering_status")
                    cur.fetchall()
                elif kind == 2:
                    cur.execute(f"SELECT {n} * 100 + {i}")
                    assert cur.fetchall() == [(n * 100 + i,)]
                elif kind == 3:
                    cur.execute("SELECT count(*) FROM sys.procedures")
                    assert cur.fetchall()[0][0] >= 2
                else:
                    cur.execute("CALL sys.describe_procedure('version')")
                    assert cur.fetchall()[0][0] == "sys.version"
            conn.close()
            done.append(n)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            failures.append(f"client {n}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert failures == []
    assert sorted(done) == list(range(16))
