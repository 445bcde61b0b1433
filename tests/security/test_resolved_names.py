"""Names as Spark resolves them, values never expanded, nothing fetched, and a
reader's normal work allowed (security round 3).

- Data sources, functions and catalogs are compared the way Spark compares
  them: a data source by Spark's own lookup (its short names match with
  Java's ``equalsIgnoreCase``, so ``cſv`` is ``csv``), function names without
  persistent functions among the built-ins; ``IDENTIFIER('…')`` is decided on
  what Spark builds from it.
- ``${…}`` in a session's configuration, a statement's ``confOverlay`` or a
  ``SET`` is refused, never expanded.
- XML functions (which fetch what a document names) are refused to every role.
"""

from __future__ import annotations

import http.server
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyhive import exc, hive
from TCLIService import ttypes

from tests.security.conftest import PASSWORD
from tierlake.procedures import load_builtins
from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.auth.authz import Authorizer, SparkSessions
from tierlake.server.sqlapi import roles as R

pytestmark = pytest.mark.integration


def login(gw, user, **kwargs):
    return hive.connect("127.0.0.1", gw.port, username=user, password=PASSWORD[user], auth="CUSTOM", **kwargs)


def refusal(cursor, statement):
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    return status.sqlState, status.errorMessage


@pytest.fixture(scope="module")
def files(spark, tmp_path_factory):
    """A directory with one CSV file, and a database with an Iceberg table, a branch and a tag."""
    tmp = tmp_path_factory.mktemp("names")
    (tmp / "secret.csv").write_text("s3cret\n")
    db = "names_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {db}.t (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {db}.t VALUES (1)")
    spark.sql(f"ALTER TABLE {db}.t CREATE BRANCH audit")
    spark.sql(f"ALTER TABLE {db}.t CREATE TAG first")
    spark.sql(f"INSERT INTO {db}.t VALUES (2)")
    yield tmp, db
    spark.sql(f"DROP DATABASE {db} CASCADE")


@pytest.fixture(scope="module")
def authorizer(spark):
    return Authorizer(None, load_builtins()).attach(SparkSessions(spark))


def reader_may(authorizer, statement: str, database: str = "default") -> bool:
    sessions = authorizer.sessions
    jsession = sessions.session(None, None)
    plan = planauth.parse_plan(jsession, statement)
    functions = {n.seqs[0][-1].lower() for n in plan.nodes.values() if n.name == "UnresolvedFunction" and n.seqs}
    need = planauth.requirement(plan, database, sessions.functions(jsession, functions), sessions.data_source(jsession))
    return need.role == R.READER


# Characters Java's equalsIgnoreCase takes for ASCII letters (long s, dotless i, Kelvin sign, the
# dotted capital I), plus each letter's own cases.
LOOKALIKES = {"s": "sSſ", "i": "iIıİ", "k": "kKK"}


def spellings(word: str):
    return st.tuples(*[st.sampled_from(LOOKALIKES.get(c, c + c.upper())) for c in word]).map("".join)


# Spark's errors for a name it does not resolve (or parse): nothing runs.
NOTHING_RUNS = ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND", "UNRESOLVED_ROUTINE", "ROUTINE_NOT_FOUND",
                "PARSE_SYNTAX_ERROR", "INVALID_IDENTIFIER")


def resolved_refusal(spark, statement: str, role: str = R.READER) -> str | None:
    """Spark's own decision: ``statement`` analysed in the driver's session (not bound to a role,
    so nothing is refused while analysing), then the check rule's verdict on that resolved plan
    (io.tierlake.internal.AuthzCheck). A statement Spark cannot analyse runs nothing: None when the
    name is simply not a table, else the reason (a data source tried to read the files)."""
    try:
        analysed = spark.sql(statement)._jdf.queryExecution().analyzed()
    except Exception as error:  # noqa: BLE001 - e.g. parquet's "not a Parquet file": it tried to read
        if any(kind in str(error) for kind in NOTHING_RUNS):
            return None
        return f"analysis failed: {str(error)[:200]}"
    return spark.sparkContext._jvm.io.tierlake.internal.AuthzCheck.refusal(analysed, role)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(["csv", "json", "text", "binaryfile", "parquet", "iceberg"]).flatmap(spellings))
def test_a_data_source_is_what_spark_resolves_in_any_spelling(spark, authorizer, files, name):
    tmp, _ = files
    statement = f"SELECT * FROM `{name}`.`{tmp}`"
    # The gateway's decision on Spark's parse equals the check rule's on Spark's resolved plan.
    assert reader_may(authorizer, statement) == (resolved_refusal(spark, statement) is None), statement


CALLS = {
    "abs": "`{}`(-1)",
    "reflect": "`{}`('java.lang.System', 'getProperty', 'java.version')",
    "java_method": "`{}`('java.lang.System', 'getProperty', 'java.version')",
    "xpath_string": "`{}`('<a>x</a>', 'a')",
}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), function=st.sampled_from(sorted(CALLS)))
def test_a_function_is_decided_as_spark_resolves_it(spark, authorizer, data, function):
    name = data.draw(spellings(function))
    form = data.draw(st.sampled_from(["SELECT {}", "SELECT IDENTIFIER('{name}')({args})"]))
    call = CALLS[function].format(name)
    statement = form.format(call, name=name, args=call[len(name) + 3:-1])
    refused = resolved_refusal(spark, statement)
    if refused is not None:  # what Spark resolved runs reflection or XPath: the gateway refused it first
        assert not reader_may(authorizer, statement), statement
    # A call of a harmless built-in the gateway lets a reader make resolves harmless too.
    if function == "abs":
        assert refused is None


def test_identifier_clause_is_decided_on_what_spark_builds(authorizer, files):
    tmp, db = files
    assert reader_may(authorizer, f"SELECT * FROM IDENTIFIER('{db}.t')")
    assert not reader_may(authorizer, f"SELECT * FROM IDENTIFIER('c\u017fv.`{tmp}`')")
    assert not reader_may(authorizer, "SELECT IDENTIFIER('reflect')('java.lang.System', 'getenv')")
    assert reader_may(authorizer, "SELECT IDENTIFIER('abs')(-1)")
    # A name that is not a literal cannot be known before Spark evaluates it: admin.
    assert not reader_may(authorizer, f"SELECT * FROM IDENTIFIER(concat('{db}', '.t'))")


def test_a_lookalike_data_source_is_refused_to_a_reader_through_the_gateway(auth_gateway, files):
    tmp, _ = files
    with login(auth_gateway, "rita") as conn:
        cursor = conn.cursor()
        for name in ("b\u0131naryf\u0131le", "c\u017fv", "TEXT", "\u0130ceberg"):
            state, message = refusal(cursor, f"SELECT * FROM `{name}`.`{tmp}`")
            assert state == "42501" and "reads files by path" in message, message
        cursor.execute("SELECT 1")
        assert cursor.fetchall() == [(1,)]


def test_an_admins_persistent_function_is_not_a_readers_builtin(auth_gateway, files):
    _, db = files
    with login(auth_gateway, "ann") as admin, login(auth_gateway, "rita") as reader:
        a, r = admin.cursor(), reader.cursor()
        a.execute(f"CREATE FUNCTION {db}.refl AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'")
        # Once called, the function sits in Spark's registry; its bare name must not pass as a built-in.
        a.execute(f"SELECT {db}.refl('java.lang.System', 'getProperty', 'java.version')")
        assert a.fetchall()
        r.execute(f"USE {db}")
        state, message = refusal(r, "SELECT refl('java.lang.System', 'setProperty', 'tierlake.attack', 'x')")
        assert state == "42501" and "refl" in message and "admin" in message, message
        state, message = refusal(r, f"SELECT {db}.refl('java.lang.System', 'getenv', 'HOME')")
        assert state == "42501", message
    from pyspark import SparkContext
    assert SparkContext._jvm.java.lang.System.getProperty("tierlake.attack") is None


def test_readers_normal_work_is_allowed(auth_gateway, spark, files):
    _, db = files
    first = spark.sql(f"SELECT snapshot_id FROM {db}.t.snapshots ORDER BY committed_at").collect()[0][0]
    with login(auth_gateway, "rita") as conn:
        cursor = conn.cursor()

        def rows(statement):
            cursor.execute(statement)
            return sorted(tuple(r) for r in cursor.fetchall())

        assert rows(f"SELECT id FROM {db}.t VERSION AS OF {first}") == [(1,)]
        assert rows(f"SELECT id FROM {db}.t TIMESTAMP AS OF current_timestamp()") == [(1,), (2,)]
        assert rows(f"SELECT id FROM {db}.t.branch_audit") == [(1,)]
        assert rows(f"SELECT id FROM {db}.t VERSION AS OF 'first'") == [(1,)]
        assert rows(f"SELECT id FROM IDENTIFIER('{db}.t')") == [(1,), (2,)]
        cursor.execute(f"CREATE OR REPLACE TEMPORARY VIEW recent AS SELECT id FROM {db}.t WHERE id > 1")
        assert rows("SELECT id FROM recent") == [(2,)]
        assert ("spark_catalog",) in rows("SHOW CATALOGS")
        cursor.execute("SET spark.sql.adaptive.coalescePartitions.enabled=false")
        cursor.execute("SET spark.sql.session.timeZone=Europe/Paris")
        assert rows("SELECT current_timezone()") == [("Europe/Paris",)]
        # Refusals name the statement and the role it needs.
        state, message = refusal(cursor, "CLEAR CACHE")
        assert state == "42501" and "CLEAR CACHE needs the admin role" in message, message
        state, message = refusal(cursor, "SET spark.sql.shuffle.partitions=1000000")
        assert "beyond what a reader may set" in message and "admin" in message, message
        # A back-quoted name with a dot is a table name, not a path: Spark's own answer.
        state, message = refusal(cursor, f"SELECT * FROM {db}.`a.b`")
        assert "TABLE_OR_VIEW_NOT_FOUND" in message, message
        # A temporary view is the session's own, and only a local one is a reader's.
        state, message = refusal(cursor, "CREATE GLOBAL TEMPORARY VIEW g AS SELECT 1")
        assert state == "42501", message
        state, message = refusal(cursor, f"CREATE VIEW {db}.v AS SELECT 1")
        assert state == "42501", message
        state, message = refusal(cursor, "CREATE TEMPORARY VIEW f USING csv OPTIONS (path '/etc')")
        assert state == "42501", message


def test_values_are_never_expanded(auth_gateway):
    for configuration in ({"set:hiveconf:spark.sql.session.timeZone": "${env:HOME}"},
                          {"set:hiveconf:spark.sql.shuffle.partitions": "${system:user.home}"},
                          {"use:database": "${hiveconf:javax.jdo.option.ConnectionPassword}"}):
        with pytest.raises(exc.OperationalError) as info:
            login(auth_gateway, "rita", configuration=configuration)
        message = info.value.args[0].status.errorMessage
        assert "never expands" in message or "permission denied" in message, message
    with login(auth_gateway, "rita") as conn:
        cursor = conn.cursor()
        state, message = refusal(cursor, "SET spark.sql.session.timeZone=${env:HOME}")
        assert state == "42501" and "never expands" in message, message
        cursor.execute("SET spark.sql.session.timeZone")
        assert "${" not in str(cursor.fetchall())
        # confOverlay, which PyHive does not send: the raw Thrift call.
        request = ttypes.TExecuteStatementReq(sessionHandle=conn._sessionHandle, statement="SELECT 1",
                                              confOverlay={"spark.sql.session.timeZone": "${env:HOME}"})
        response = conn.client.ExecuteStatement(request)
        assert response.status.statusCode == ttypes.TStatusCode.ERROR_STATUS
        assert "never expands" in response.status.errorMessage
        cursor.execute("SELECT 1")
        assert cursor.fetchall() == [(1,)]


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):
        _Recorder.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"fetched")

    def log_message(self, *args):
        pass


def test_xml_functions_fetch_nothing(auth_gateway, spark):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # An external DTD: Spark's XPath reader fetches it (entities it leaves alone).
        document = f'<!DOCTYPE a SYSTEM "http://127.0.0.1:{server.server_port}/leak"><a>x</a>'

        statement = f"SELECT xpath_string('{document}', 'a')"
        # The class of attack is real: Spark's XPath evaluator fetches the DTD. (Called directly: no
        # session runs XPath any more, the server's own included, see AuthzCheck.java.)
        try:
            spark.sparkContext._jvm.org.apache.spark.sql.catalyst.expressions.xml.UDFXPathUtil().evalString(
                document, "a")
        except Exception:  # noqa: BLE001 - whether it fails after fetching does not matter
            pass
        with pytest.raises(Exception, match="XML functions fetch what a document names"):
            spark.sql(statement).collect()
        fetched = list(_Recorder.hits)
        _Recorder.hits.clear()
        for user in ("rita", "ann"):  # refused to every role, the admin too
            with login(auth_gateway, user) as conn:
                state, message = refusal(conn.cursor(), statement)
                assert state == "42501" and "XML functions" in message, message
        assert _Recorder.hits == []
        assert fetched == ["/leak"]
    finally:
        server.shutdown()


def test_spark_refuses_on_the_resolved_plan_what_the_parse_let_through(auth_gateway, files, monkeypatch):
    """The decision that counts is made inside Spark: with the gateway's parse-based rules
    switched off (everything a reader's), the check rule still refuses on the resolved plan."""
    tmp, db = files
    monkeypatch.setattr(planauth, "requirement", lambda *args, **kwargs: planauth.Requirement(R.READER, "SELECT"))
    with login(auth_gateway, "rita") as conn:
        cursor = conn.cursor()
        for statement, what in [
            (f"SELECT * FROM `b\u0131naryf\u0131le`.`{tmp}`", "a read of files by path"),
            (f"SELECT * FROM `TEXT`.`{tmp}/secret.csv`", "a read of files by path"),
            ("SELECT reflect('java.lang.System', 'setProperty', 'tierlake.attack', '1')", "reflection"),
            ("SELECT xpath_string('<a>x</a>', 'a')", "XML functions"),
            (f"INSERT INTO {db}.t VALUES (3)", "a write"),
            (f"SELECT id FROM {db}.t WHERE id IN (SELECT length(reflect('java.lang.System', 'getenv', 'HOME')))",
             "reflection"),
        ]:
            _, message = refusal(cursor, statement)
            assert "decided on Spark's resolved plan" in message and what in message, message
        cursor.execute(f"SELECT id FROM {db}.t ORDER BY id")
        assert cursor.fetchall() == [(1,), (2,)]
    from pyspark import SparkContext
    assert SparkContext._jvm.java.lang.System.getProperty("tierlake.attack") is None
    with login(auth_gateway, "will") as conn:  # a writer's write passes the check rule
        cursor = conn.cursor()
        cursor.execute(f"INSERT INTO {db}.t VALUES (3)")
        cursor.execute(f"DELETE FROM {db}.t WHERE id = 3")
