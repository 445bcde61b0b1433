"""The gateway in front of a REAL Spark Thrift Server, with real clients:
PyHive (SASL PLAIN and NOSASL) and beeline/Hive JDBC from pyspark's jars."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tierlake.server.gateway.transport.server import Gateway
from tierlake.server.gateway.transport.settings import GatewaySettings

from ..toy import ToyHandler, toy_row, toy_ts_text

pytestmark = pytest.mark.integration

AUTH_MODES = ["PLAIN", "NOSASL"]


@pytest.fixture(scope="module")
def sts_port(server):
    """The shared tierlake server's internal Spark Thrift Server (loopback; the gateways log in with the secret).

    One SparkSession per test process: these gateways sit in front of the same
    Thrift Server as the server's own gateway, with a toy handler instead.
    """
    return server.thrift_port


@pytest.fixture(scope="module")
def gateways(sts_port, server):
    handler = ToyHandler()
    started = {auth: Gateway(GatewaySettings(backend_port=sts_port, auth=auth, backend_secret=server.internal_secret),
                             handler).start()
               for auth in AUTH_MODES}
    yield started
    for gw in started.values():
        gw.stop()


@pytest.fixture(params=AUTH_MODES)
def gateway(request, gateways):
    return gateways[request.param]


def connect(gw: Gateway, user: str = "alice"):
    from pyhive import hive

    if gw.settings.auth == "NOSASL":
        return hive.connect("127.0.0.1", gw.port, username=user, auth="NOSASL")
    return hive.connect("127.0.0.1", gw.port, username=user)  # auth NONE = SASL PLAIN


def query(conn, sql: str, arraysize: int = 1000):
    cursor = conn.cursor(arraysize=arraysize)
    try:
        cursor.execute(sql)
        return cursor.fetchall()
    finally:
        cursor.close()


def test_relayed_select_and_show_databases(gateway):
    conn = connect(gateway)
    try:
        assert query(conn, "SELECT 1") == [(1,)]
        assert ("default",) in query(conn, "SHOW DATABASES")
        assert query(conn, "SELECT 'x' AS s, CAST(NULL AS INT) AS n") == [("x", None)]
    finally:
        conn.close()


def test_relayed_metadata_rpc_get_tables(gateway):
    from TCLIService import ttypes

    conn = connect(gateway)
    try:
        conn.cursor().execute("CREATE TABLE IF NOT EXISTS gw_relay_t (a INT) USING parquet")
        resp = conn.client.GetTables(ttypes.TGetTablesReq(
            sessionHandle=conn.sessionHandle, schemaName="default", tableName="gw_relay%"))
        assert resp.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS
        fetched = conn.client.FetchResults(ttypes.TFetchResultsReq(
            operationHandle=resp.operationHandle,
            orientation=ttypes.TFetchOrientation.FETCH_NEXT, maxRows=100))
        # TABLE_CAT, TABLE_SCHEM, TABLE_NAME, ...
        assert fetched.results.columns[2].stringVal.values == ["gw_relay_t"]
        conn.client.CloseOperation(ttypes.TCloseOperationReq(resp.operationHandle))
    finally:
        conn.close()


def test_local_call_fetched_in_batches(gateway):
    conn = connect(gateway)
    batches = []
    fetch = conn.client.FetchResults

    def counting_fetch(req):
        batches.append(req.maxRows)
        return fetch(req)

    conn.client.FetchResults = counting_fetch
    try:
        cursor = conn.cursor(arraysize=100)
        cursor.execute("CALL TOY.ROWS(2500)")
        assert [d[:2] for d in cursor.description] == [
            ("name", "STRING_TYPE"), ("n", "BIGINT_TYPE"), ("ts", "TIMESTAMP_TYPE"),
            ("nothing", "STRING_TYPE")]
        rows = cursor.fetchall()
        assert rows == [toy_row(i) for i in range(2500)]
        assert len(batches) >= 25 and set(batches) == {100}
    finally:
        conn.close()


def test_local_call_error_keeps_the_connection_usable(gateway):
    from pyhive import hive

    conn = connect(gateway)
    try:
        cursor = conn.cursor()
        with pytest.raises(hive.OperationalError) as info:
            cursor.execute("CALL TOY.FAIL()")
        status = info.value.args[0].status
        assert (status.sqlState, status.errorCode) == ("42883", 2002)
        assert status.errorMessage == "procedure toy.fail does not exist"
        assert query(conn, "SELECT 2") == [(2,)]
        assert query(conn, "CALL TOY.ROWS(3)") == [toy_row(i) for i in range(3)]
    finally:
        conn.close()


def test_relayed_sql_error_keeps_the_connection_usable(gateway):
    from pyhive import hive

    conn = connect(gateway)
    try:
        cursor = conn.cursor()
        with pytest.raises(hive.OperationalError) as info:
            cursor.execute("SELECT * FROM no_such_table")
        status = info.value.args[0].status
        assert "no_such_table" in status.errorMessage
        assert status.sqlState == "42P01"
        assert query(conn, "CALL TOY.ROWS(1)") == [toy_row(0)]
        assert query(conn, "SELECT 3") == [(3,)]
    finally:
        conn.close()


def test_session_info_reaches_the_handler(gateway):
    conn = connect(gateway, user="carol")
    try:
        [(user, protocol, address)] = query(conn, "CALL TOY.WHOAMI()")
        assert user == "carol"
        assert protocol == 5  # PyHive asks for V6 (enum value 5)
        assert address.startswith("127.0.0.1:")
    finally:
        conn.close()


def beeline(port: int, script: str, tmp_path: Path, url_options: str = "",
            user: str = "someuser") -> subprocess.CompletedProcess:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    script_file = tmp_path / "script.sql"
    script_file.write_text(script)
    return subprocess.run(
        ["java", "-cp", f"{jars}/*", "org.apache.hive.beeline.BeeLine",
         "-u", f"jdbc:hive2://127.0.0.1:{port}/default{url_options}", "-n", user,
         "--silent=true", "--outputformat=csv2", "--force=true", "-f", str(script_file)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def jdbc_ts(i: int) -> str:
    """Hive JDBC parses timestamp strings into java.sql.Timestamp, whose
    toString always has a fraction ("...:05.0")."""
    text = toy_ts_text(i)
    return text if "." in text else text + ".0"


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def test_beeline_sasl_plain(gateways, tmp_path):
    result = beeline(gateways["PLAIN"].port, "\n".join([
        "SELECT 1 AS one;",
        "SHOW DATABASES;",
        "SELECT TIMESTAMP '2024-01-02 03:04:05' AS relayed_ts;",
        "CREATE TABLE IF NOT EXISTS gw_beeline_t (a INT) USING parquet;",
        "!tables",
        "CALL TOY.ROWS(1500);",
        "CALL TOY.WHOAMI();",
        "CALL TOY.FAIL();",
        "SELECT 40 + 2 AS answer;",
        "SELECT * FROM no_such_table;",
        "SELECT 'still here' AS s;",
    ]) + "\n", tmp_path)
    out, err = lines(result.stdout), result.stderr
    assert "one" in out and "1" in out
    assert "namespace" in out and "default" in out
    assert any("gw_beeline_t" in line and "TABLE" in line for line in out), result.stdout
    assert "name,n,ts,nothing" in out
    assert f"row0,0,{jdbc_ts(0)},NULL" in out, result.stdout[:1500]
    assert f"row1,1,{jdbc_ts(1)},NULL" in out
    assert f"row1499,1499,{jdbc_ts(1499)},NULL" in out
    # Spark's own timestamps come out of Hive JDBC the same way.
    assert "relayed_ts" in out and "2024-01-02 03:04:05.0" in out
    assert sum(line.startswith("row") for line in out) == 1500
    assert any(line.startswith("someuser,9,127.0.0.1:") for line in out)  # Hive JDBC 2.3: V10
    assert "Error: procedure toy.fail does not exist (state=42883,code=2002)" in err
    assert "answer" in out and "42" in out  # same connection, after the error
    assert "state=42P01" in err
    assert "still here" in out


def test_beeline_nosasl(gateways, tmp_path):
    result = beeline(gateways["NOSASL"].port,
                     "SELECT 7 AS seven;\nCALL TOY.ROWS(3);\nCALL TOY.FAIL();\n", tmp_path,
                     url_options=";auth=noSasl")
    out = lines(result.stdout)
    assert "seven" in out and "7" in out
    assert f"row2,2,{jdbc_ts(2)},NULL" in out
    assert "(state=42883,code=2002)" in result.stderr


def send_garbage(sock: socket.socket, garbage: bytes) -> None:
    # The gateway may hang up (with a reset, as data is left unread) before
    # everything is sent: that is the behaviour under test, not a failure.
    try:
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@pytest.mark.parametrize("garbage", [os.urandom(4096), b"\x01\x00\x00\x00\x05PL",
                                     b"\x80\x01\x00\x01\x00\x00\x00\x0bExecuteStat"],
                         ids=["random", "truncated-frame", "truncated-message"])
def test_garbage_does_not_kill_the_gateway(gateway, garbage):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        send_garbage(sock, garbage)
        try:
            while sock.recv(4096):
                pass
        except ConnectionResetError:
            pass
    conn = connect(gateway)
    try:
        assert query(conn, "SELECT 1") == [(1,)]
        assert query(conn, "CALL TOY.ROWS(2)") == [toy_row(0), toy_row(1)]
    finally:
        conn.close()


def test_sixteen_concurrent_clients(gateways):
    def client(index: int) -> int:
        gw = gateways[AUTH_MODES[index % 2]]
        conn = connect(gw, user=f"user{index}")
        done = 0
        try:
            for step in range(25):
                if step % 3 == 0:
                    n = 1 + (index + step) % 40
                    assert query(conn, f"CALL TOY.ROWS({n})", arraysize=7) == \
                        [toy_row(i) for i in range(n)]
                else:
                    value = index * 100 + step
                    assert query(conn, f"SELECT {value} AS v, 'c{index}' AS c") == \
                        [(value, f"c{index}")]
                done += 1
        finally:
            conn.close()
        return done

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(client, range(16)))
    assert results == [25] * 16
    assert time.monotonic() - started < 90
