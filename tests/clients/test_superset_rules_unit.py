"""The Superset engine spec's decisions about statements and errors, without
Superset (tierlake_client.superset.statements) and without a server."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading

import pytest
from sqlalchemy.exc import DBAPIError
from tierlake_client.exceptions import ConfigError, TierlakeError
from tierlake_client.jdbc import connect
from tierlake_client.superset.statements import connection_error_text, spark_change, without_result_set

from tests.conftest import free_port


@pytest.mark.parametrize(("statement", "kind"), [
    ("LOAD DATA INPATH '/tmp/x' INTO TABLE t", "LOAD DATA"),
    ("/* nightly */ load data local inpath 'x' overwrite into table t", "LOAD DATA"),
    ("ANALYZE TABLE t COMPUTE STATISTICS", "ANALYZE TABLE"),
    ("analyze tables in db compute statistics noscan", "ANALYZE TABLE"),
    ("MSCK REPAIR TABLE t", "MSCK REPAIR TABLE"),
    ("-- fix partitions\nmsck repair table t sync partitions", "MSCK REPAIR TABLE"),
    ("REPAIR TABLE t", "REPAIR TABLE"),
    ("ADD JAR /tmp/evil.jar", "ADD JAR"),
    ("add jars '/a.jar' '/b.jar'", "ADD JAR"),
    ("ADD FILE /tmp/x", "ADD FILE"),
    ("ADD ARCHIVE /tmp/x.zip", "ADD ARCHIVE"),
    ("CACHE TABLE c AS SELECT 1", "CACHE TABLE … AS SELECT"),
    ("CACHE LAZY TABLE c OPTIONS ('storageLevel' 'DISK_ONLY') AS SELECT * FROM t", "CACHE TABLE … AS SELECT"),
    ("cache table c select 1 as a", "CACHE TABLE … AS SELECT"),  # Spark's AS is optional
    ("REFRESH TABLE t", "REFRESH"),
    ("REFRESH '/warehouse/t'", "REFRESH"),
    ("refresh function f", "REFRESH"),
    ("LOAD DATA INPATH 'unterminated", "LOAD DATA"),  # untokenisable: its first words
])
def test_spark_statements_that_change_state_are_named(statement, kind):
    assert spark_change(statement) == kind


@pytest.mark.parametrize("statement", [
    "SELECT 1", "CACHE TABLE t", "UNCACHE TABLE t", "SELECT 'LOAD DATA' AS a", "SHOW TABLES",
    "SELECT * FROM analyze_results", "/* ADD JAR x */ SELECT 1", "DESCRIBE TABLE t", "CALL sys.version()",
    "WITH refresh AS (SELECT 1) SELECT * FROM refresh", "",
])
def test_reads_and_plain_caching_are_not_changes(statement):
    assert spark_change(statement) is None


class _Cursor:
    def __init__(self, names):
        self.description = None if names is None else [(n, "STRING_TYPE", None, None, None, None, True)
                                                         for n in names]


def test_ddl_and_writes_have_no_result_set():
    assert without_result_set(_Cursor(None))
    assert without_result_set(_Cursor(["Result"]))
    assert not without_result_set(_Cursor(["key", "value"]))
    assert not without_result_set(_Cursor(["result", "n"]))


def test_the_reason_of_a_failed_connection_test_comes_out_of_supersets_wrapper():
    # Superset's test connection: DBAPIError(str(ex) or None, None, None).
    wrapped = DBAPIError("cannot connect to the gateway at h:1: nothing is listening there", None, None)
    assert str(wrapped).startswith("(builtins.NoneType) None")
    assert connection_error_text(wrapped) == "cannot connect to the gateway at h:1: nothing is listening there"
    assert connection_error_text(DBAPIError(None, None, None)) is None
    assert connection_error_text(ValueError("x")) is None


def test_connection_failures_say_why():
    port = free_port()  # nothing listens there
    with pytest.raises(TierlakeError, match=f"cannot connect to the gateway at 127.0.0.1:{port}: nothing is listening"):
        connect(f"jdbc:hive2://127.0.0.1:{port}/default", "u", "pw")
    with pytest.raises(TierlakeError, match=f"TLS connection to 127.0.0.1:{port} failed.*nothing is listening"):
        connect(f"jdbc:hive2://127.0.0.1:{port}/default;ssl=true", "u", "pw")
    with pytest.raises(ConfigError, match="auth=noSasl sends no password"):
        connect(f"jdbc:hive2://127.0.0.1:{port}/default;auth=noSasl", "u", "pw")


def test_a_plain_connection_to_a_tls_gateway_says_it_may_need_ssl(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve():  # a TLS listener, as a gateway with tierlake.gateway.ssl.certfile
            client, _ = listener.accept()
            try:
                context.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                client.close()

        threading.Thread(target=serve, daemon=True).start()
        with pytest.raises(TierlakeError, match=f"cannot connect to the gateway at 127.0.0.1:{port}: it closed the "
                                                "connection at login .*a TLS gateway needs ssl=true"):
            connect(f"jdbc:hive2://127.0.0.1:{port}/default", "u", "pw")
