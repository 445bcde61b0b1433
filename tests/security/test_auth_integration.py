"""Authentication, roles and TLS at the real gateway with real clients
(PyHive, beeline), in front of the shared server's Spark Thrift Server."""

from __future__ import annotations

import subprocess
import tempfile
import uuid

import pytest
from pyhive import exc, hive
from tierlake_client.jdbc import connect

from tests.conftest import _java_classpath
from tests.security.conftest import PASSWORD

pytestmark = pytest.mark.integration


ROLE_OF = {"ts": "tiering-service", "rita": "reader", "will": "writer"}

def login(gw, user, password=None, **kwargs):
    return hive.connect("127.0.0.1", gw.port, username=user, password=password or PASSWORD[user],
                        auth="CUSTOM", **kwargs)


def sql_error(cursor, statement):
    with pytest.raises(exc.OperationalError) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    return status.sqlState, status.errorMessage


def beeline(port, user, password, script, url_options=""):
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as f:
        f.write(script + "\n")
        f.flush()
        result = subprocess.run(
            ["java", "-cp", _java_classpath(), "org.apache.hive.beeline.BeeLine",
             "-u", f"jdbc:hive2://127.0.0.1:{port}/default{url_options}", "-n", user, "-p", password,
             "--silent=true", "--outputformat=csv2", "-f", f.name],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    return result, result.stdout + result.stderr


def test_right_credentials_work_and_wrong_ones_are_refused(auth_gateway):
    with login(auth_gateway, "rita") as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM sys.lake_tiering_status")
        assert cur.fetchall()[0][0] >= 0
    for user, password in [("rita", "wrong"), ("nobody", "rita-pw")]:
        with pytest.raises(Exception, match="Error validating the login"):
            login(auth_gateway, user, password)


def test_a_nosasl_client_gets_a_sql_error_not_a_dropped_connection(auth_gateway):
    with pytest.raises(exc.OperationalError) as info:
        hive.connect("127.0.0.1", auth_gateway.port, username="rita", auth="NOSASL")
    status = info.value.args[0].status
    assert status.sqlState == "28000" and status.errorMessage.startswith("Authentication required")
    with login(auth_gateway, "rita") as conn:  # the gateway goes on
        conn.cursor().execute("SELECT 1")


def test_roles_decide_what_runs(auth_gateway, server):
    db = "sec_" + uuid.uuid4().hex[:8]
    with login(auth_gateway, "ann") as admin, login(auth_gateway, "will") as writer, \
            login(auth_gateway, "rita") as reader, login(auth_gateway, "ts") as tiering:
        a, w, r, t = admin.cursor(), writer.cursor(), reader.cursor(), tiering.cursor()
        a.execute(f"CREATE DATABASE {db}")
        a.execute(f"CREATE TABLE {db}.events (id BIGINT, msg STRING) "
                  "TBLPROPERTIES ('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
        # A data engineer (writer) feeds the stream table; a reader may not.
        w.execute(f"INSERT INTO {db}.events VALUES (1, 'a'), (2, 'b')")
        state, message = sql_error(r, f"INSERT INTO {db}.events VALUES (3, 'c')")
        assert state == "42501"
        assert message == ("permission denied: INSERT needs the admin or writer role; user 'rita' has reader")
        r.execute(f"SELECT id FROM {db}.events ORDER BY id")
        assert r.fetchall() == [(1,), (2,)]  # the connection is still usable after a denial
        # Admin procedures and DDL.
        for cursor, user in ((r, "rita"), (w, "will"), (t, "ts")):
            state, message = sql_error(cursor, f"CALL sys.disable_tiering('{db}.events')")
            assert (state, message) == (
                "42501",
                "permission denied: CALL sys.disable_tiering needs the admin "
                f"role; user '{user}' has {ROLE_OF[user]}",
            )
        assert sql_error(w, f"DROP TABLE {db}.events")[0] == "42501"
        assert sql_error(w, "INSERT INTO sys.tiering_tables SELECT * FROM sys.tiering_tables")[0] == "42501"
        # The tiering protocol is the tiering service's alone (even an admin may not heartbeat).
        for cursor in (r, w, a):
            assert sql_error(cursor, "CALL sys.heartbeat(job_id => ' ')")[0] == "42501"
        state, message = sql_error(t, "CALL sys.heartbeat(job_id => ' ')")
        assert (state, message) == ("22023", "parameter 'job_id' must not be empty")  # authorised, then validated
        r.execute("CALL sys.list_tiering_statuses(table => %(t)s)", {"t": f"{db}.events"})
        assert r.fetchall()[0][:2] == (db, "events")
        # A writer may not escape to sys by USE either.
        w.execute("USE sys")
        assert sql_error(w, "INSERT INTO tiering_tables SELECT * FROM tiering_tables")[0] == "42501"
        a.execute(f"CALL sys.disable_tiering('{db}.events')")
        a.execute(f"DROP DATABASE {db} CASCADE")
        a.execute(f"DROP DATABASE IF EXISTS {db}_lake CASCADE")


def test_sys_procedures_shows_each_procedure_s_role(auth_gateway):
    with login(auth_gateway, "rita") as conn:
        cur = conn.cursor()
        cur.execute("SELECT name, role FROM sys.procedures")
        roles = dict(cur.fetchall())
    assert roles["sys.heartbeat"] == "tiering-service"
    assert roles["sys.enable_tiering"] == "admin" and roles["sys.version"] == "reader"
    assert None not in roles.values()


def test_the_tiering_service_client_authenticates_with_its_password(auth_gateway, monkeypatch):
    from tierlake.server.clients.procedure_client import JdbcClient

    url = f"jdbc:hive2://127.0.0.1:{auth_gateway.port}/default"
    info = dict(JdbcClient(url, "ts", "ts-pw").call("server_info"))
    assert "warehouse" in info
    with pytest.raises(Exception, match="Error validating the login"):
        JdbcClient(url, "ts", "nope").call("server_info")
    with pytest.raises(exc.OperationalError, match="needs the tiering-service role"):
        JdbcClient(url, "rita", "rita-pw").call("heartbeat", job_id="x")


def test_beeline_right_and_wrong_password_missing_role_and_nosasl(auth_gateway):
    port = auth_gateway.port
    ok, text = beeline(port, "rita", "rita-pw", "SELECT 'hello-' || 'reader' AS greeting;")
    assert ok.returncode == 0 and "hello-reader" in text, text
    bad, text = beeline(port, "rita", "wrong", "SELECT 1;")
    assert bad.returncode != 0 and "Error validating the login" in text, text
    denied, text = beeline(port, "rita", "rita-pw", "CALL sys.enable_tiering('default.nothing');\nSELECT 'after';")
    assert "permission denied: CALL sys.enable_tiering needs the admin role; user 'rita' has reader" in text, text
    assert "state=42501" in text and "code=2008" in text
    nosasl, text = beeline(port, "rita", "rita-pw", "SELECT 1;", ";auth=noSasl")
    assert nosasl.returncode != 0 and "Authentication required" in text, text


def test_pyhive_over_tls_with_the_ca_and_not_without(tls_gateway, tls_files):
    cert, _, _ = tls_files
    url = f"jdbc:hive2://127.0.0.1:{tls_gateway.port}/default;ssl=true"
    with connect(url, "rita", "rita-pw", ca_file=str(cert)) as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM sys.tiering_rounds")
        assert cur.fetchall()[0][0] >= 0
        assert sql_error(cur, "CALL sys.retry_tiering('a.b')")[0] == "42501"
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        connect(url, "rita", "rita-pw")  # the system CAs do not trust a self-signed certificate
    with pytest.raises(Exception, match="Error validating the login"):
        connect(url, "rita", "wrong", ca_file=str(cert))
    with pytest.raises(Exception):  # noqa: B017 - the client raises whichever transport error the timing gives
        hive.connect("127.0.0.1", tls_gateway.port, username="rita", password="rita-pw", auth="CUSTOM")
    with connect(url, "rita", "rita-pw", ca_file=str(cert)) as conn:  # still serving after plain-text garbage
        conn.cursor().execute("SELECT 1")


def test_beeline_over_tls_with_a_trust_store(tls_gateway, tls_files):
    _, _, store = tls_files
    ok, text = beeline(
        tls_gateway.port,
        "ann",
        "ann-pw",
        "SELECT 'over-' || 'tls' AS t;",
        f";ssl=true;sslTrustStore={store};trustStorePassword=changeit",
    )
    assert ok.returncode == 0 and "over-tls" in text, text


def test_tierlake_tiering_service_logs_in_with_its_password(auth_gateway, tmp_path):
    """The CLI's password sources, as far as its first call (server_info):
    the shared server has no metastore service, which the service then
    reports -- after a successful login."""
    from tests.conftest import subprocess_env, tierlake_command

    url = f"jdbc:hive2://127.0.0.1:{auth_gateway.port}/default"
    secret = tmp_path / "ts-password"
    secret.write_text("ts-pw\n")

    def service(*extra, **env):
        return subprocess.run(
            tierlake_command()
            + ["tiering-service", "--url", url, "--user", "ts", "--home", str(tmp_path / "svc"), *extra],
            capture_output=True,
            text=True,
            timeout=120,
            env={**subprocess_env(**env), **({} if "TIERLAKE_PASSWORD" in env else {"TIERLAKE_PASSWORD": ""})},
        )

    for run in (service(TIERLAKE_PASSWORD="ts-pw"), service("--conf", f"tierlake.client.password-file={secret}")):
        assert run.returncode == 2 and "does not share its metastore" in run.stderr, run.stderr
    wrong = service("--password", "nope")
    assert wrong.returncode == 1 and "Error validating the login" in wrong.stderr, wrong.stderr
