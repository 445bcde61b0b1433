"""Spark's own ports stay on loopback, widening them turns Spark's
authentication on, and a reader's SET shows no host, port, path or secret.

Unit tests of the decision (no JVM), then the real thing: every listening TCP
socket of a running server's process tree (the Python process and its driver
JVM), read from /proc, and SET through the gateway as a reader."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from pathlib import Path

import pytest
from pyhive import exc as hive_exc

from tests.conftest import free_port, service_ready, start_server_process, start_service_process, stop_process
from tests.security.conftest import PASSWORD
from tierlake.server.app import JVM_FEATURES
from tierlake.server.config.config import Config
from tierlake.server.runtime import session

LOOPBACK = "127.0.0.1"
WIDE = {"spark.driver.bindAddress": "0.0.0.0", "spark.driver.host": LOOPBACK}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """One home for the unit tests: spark_settings compiles tierlake's Java classes into it once."""
    return tmp_path_factory.mktemp("ports-home")


# --- the decision (no JVM) -------------------------------------------------------------------------


def test_by_default_the_driver_listens_on_loopback_without_authentication(home):
    settings = session.spark_settings(Config.load(home=home), 12345, JVM_FEATURES)
    assert settings["spark.driver.bindAddress"] == settings["spark.driver.host"] == LOOPBACK
    assert settings["spark.hadoop.hive.server2.thrift.bind.host"] == LOOPBACK
    assert "spark.authenticate" not in settings and "spark.authenticate.secret" not in settings
    assert session.jvm_environment({}) == {"SPARK_LOCAL_IP": LOOPBACK}  # the UI's bind, if a user enables it
    assert settings[session.REDACTION_KEY] == session.REDACTION_OPTIONS_REGEX


@pytest.mark.parametrize("user", [
    {"spark.driver.bindAddress": "0.0.0.0"},
    {"spark.driver.host": "192.0.2.7"},
    {"spark.driver.bindAddress": "::", "spark.driver.host": "192.0.2.7"},
    {"spark.driver.bindAddress": "no-such-host.invalid"},  # unresolvable: counted as wide
])
def test_a_wider_bind_turns_on_authentication_and_encryption_with_a_fresh_secret(home, caplog, user):
    caplog.set_level(logging.WARNING, logger="tierlake.session")
    config = Config.load(home=home, conf=user)
    first = session.spark_settings(config, 12345, JVM_FEATURES)
    second = session.spark_settings(config, 12345, JVM_FEATURES)
    for settings in (first, second):
        assert settings["spark.authenticate"] == "true"
        assert settings["spark.network.crypto.enabled"] == "true"
        assert re.fullmatch(r"[0-9a-f]{64}", settings["spark.authenticate.secret"])
        for key, value in user.items():  # the user's addresses stand
            assert settings[key] == value
    assert first["spark.authenticate.secret"] != second["spark.authenticate.secret"]  # per process
    assert "not loopback" in caplog.text and "spark.authenticate" in caplog.text
    assert session.jvm_environment(user) == {}  # SPARK_LOCAL_IP stays the user's
    # The secret never goes on spark-submit's command line (ps shows it to every local user).
    assert "spark.authenticate.secret" not in session.launch_settings(first)
    assert "spark.authenticate" in session.launch_settings(first)


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.1.1"])
def test_a_loopback_address_the_user_gives_stands_without_authentication(address):
    user = {"spark.driver.bindAddress": address}
    assert session.network_settings(user) == {}
    assert session.jvm_environment(user) == {"SPARK_LOCAL_IP": LOOPBACK}


def test_what_the_user_gives_wins_and_is_logged(home, caplog):
    caplog.set_level(logging.WARNING, logger="tierlake.session")
    given = {**WIDE, "spark.authenticate": "false", "spark.authenticate.secret": "cluster-secret",
             session.REDACTION_KEY: "(?i)url"}
    settings = session.spark_settings(Config.load(home=home, conf=given), 12345, JVM_FEATURES)
    assert settings["spark.authenticate"] == "false"
    assert settings["spark.authenticate.secret"] == "cluster-secret"  # a standalone cluster's shared secret
    # Spark does not start with crypto on and authentication off: the user's "false" takes crypto with it.
    assert "spark.network.crypto.enabled" not in settings
    assert settings[session.REDACTION_KEY] == "(?i)url"
    assert "spark.authenticate=false as configured" in caplog.text
    assert f"{session.REDACTION_KEY} as configured" in caplog.text


def test_a_cluster_master_without_an_address_stays_on_loopback_and_says_so(caplog):
    caplog.set_level(logging.WARNING, logger="tierlake.session")
    settings = session.network_settings({}, "spark://10.1.2.3:7077")
    assert settings == {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK}
    assert "cannot reach it" in caplog.text
    caplog.clear()
    session.network_settings({}, "local-cluster[2,1,1024]")
    assert not caplog.text


def test_secrets_stay_off_the_command_line():
    settings = {"spark.hadoop.javax.jdo.option.ConnectionPassword": "pw", "spark.authenticate.secret": "s",
                "spark.hadoop.fs.s3a.access.key": "k", "spark.driver.memory": "2g"}
    assert session.launch_settings(settings) == {"spark.driver.memory": "2g"}


def _redacted(key: str, value: str) -> bool:
    """SQLConf.redactOptions' test (Utils.redact: the pattern found in the key or the value); Java's
    regex syntax and Python's agree on this pattern."""
    pattern = re.compile(session.REDACTION_OPTIONS_REGEX.removeprefix("(?i)"), re.IGNORECASE)
    return bool(pattern.search(key) or pattern.search(value))


@pytest.mark.parametrize("key,value", [
    ("spark.driver.host", "localhost"), ("spark.driver.port", "41234"), ("spark.driver.bindAddress", "x"),
    ("spark.blockManager.port", "0"), ("spark.ui.port", "4040"),
    ("spark.hadoop.hive.server2.thrift.port", "10001"), ("spark.hadoop.hive.server2.thrift.bind.host", "x"),
    ("spark.hadoop.hive.metastore.uris", "x"), ("spark.hadoop.javax.jdo.option.ConnectionURL", "x"),
    ("spark.sql.warehouse.dir", "x"), ("spark.hadoop.hive.metastore.warehouse.dir", "x"),
    ("spark.driver.extraClassPath", "x"), ("spark.driver.extraJavaOptions", "-Dx=y"), ("spark.jars", "x"),
    ("spark.scheduler.allocation.file", "x"), ("spark.repl.local.jars", "x"), ("spark.app.initial.jar.urls", "x"),
    ("spark.master", "spark://10.1.2.3:7077"), ("any.key", "/home/tierlake/warehouse"),
    ("any.key", "file:/home/x"), ("any.key", "thrift://127.0.0.1:9083"), ("any.key", "10.1.2.3"),
])
def test_the_redaction_pattern_hides_hosts_ports_and_paths(key, value):
    assert _redacted(key, value)


def test_the_redaction_pattern_leaves_reader_settings_readable():
    from tierlake.server.gateway.auth.planauth import READER_SETTINGS

    values = ["UTC", "America/New_York", "+01:00", "200", "true", "10MB", "CORRECTED", "ANSI", "134217728"]
    for key in READER_SETTINGS:
        for value in values:
            assert not _redacted(key, value), (key, value)
    for key, value in [("spark.app.name", "tierlake"), ("spark.master", "local[2]"),
                       ("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"),
                       ("spark.sql.hive.metastore.version", "2.3.9")]:
        assert not _redacted(key, value), key


# --- the sockets of a running server ---------------------------------------------------------------


def process_tree(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # /proc/net/tcp6: four 32-bit words, each in host (little-endian) order.
    return str(ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))


def listening_sockets(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes hold."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owner[target[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table in ("tcp", "tcp6"):
        for pid in sorted(pids):
            try:
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
                break
            except OSError:
                continue
        else:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in owner:  # TCP_LISTEN
                address, port = local.split(":")
                found.append((owner[inode], _address(address), int(port, 16)))
    return sorted(set(found))


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def _jvm_pid(tree: set[int]) -> int:
    for pid in tree:
        try:
            if b"org.apache.spark.deploy.SparkSubmit" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError(f"no driver JVM among {sorted(tree)}")


@pytest.fixture
def reader_password_file(tmp_path):
    from tierlake.server.gateway.auth.passwords import set_user

    path = tmp_path / "passwords"
    set_user(path, "ann", PASSWORD["ann"], frozenset({"admin"}))
    set_user(path, "rita", PASSWORD["rita"], frozenset({"reader"}))
    set_user(path, "tiering-service", PASSWORD["ts"], frozenset({"tiering-service"}))  # the service's default --user
    return path


def _login(port: int, user: str):
    from pyhive import hive

    return hive.connect("127.0.0.1", port, username=user, password=PASSWORD[user], auth="CUSTOM")


def _rows(cursor, statement: str) -> list[tuple]:
    cursor.execute(statement)
    return cursor.fetchall()


@pytest.mark.integration
def test_only_the_gateway_listens_beyond_loopback(tmp_path, reader_password_file, monkeypatch):
    """A server whose gateway is on every address, with the metastore service
    and the Spark UI on: the driver's RPC and block manager, the UI, the
    Thrift Server, the metastore service and py4j all listen on loopback."""
    port = free_port()
    proc = start_server_process(tmp_path / "home", port, [
        "tierlake.gateway.host=0.0.0.0", f"tierlake.gateway.password-file={reader_password_file}",
        "tierlake.metastore.port=0", "spark.ui.enabled=true", "spark.ui.port=0", "tierlake.tiering.workers=0"])
    try:
        tree = process_tree(proc.pid)
        sockets = listening_sockets(tree)
        jvm = _jvm_pid(tree)
        assert len([s for s in sockets if s[0] == jvm]) >= 6, sockets  # RPC, blocks, UI, Thrift, metastore, py4j
        wide = [s for s in sockets if not _loopback(s[1])]
        assert wide == [(proc.pid, "0.0.0.0", port)], sockets
        with _login(port, "ann") as admin:
            cur = admin.cursor()
            assert _rows(cur, "SELECT count(*) FROM range(100) GROUP BY id % 3 ORDER BY 1") == [(33,), (33,), (34,)]
            assert dict(_rows(cur, "SET spark.authenticate")).get("spark.authenticate") in (None, "<undefined>")
        assert b"spark.authenticate.secret" not in Path(f"/proc/{jvm}/cmdline").read_bytes()
        # A tiering-service process builds its Spark the same way.
        monkeypatch.setenv("TIERLAKE_PASSWORD", PASSWORD["ts"])
        service = start_service_process(tmp_path / "service", f"jdbc:hive2://127.0.0.1:{port}/default",
                                        ["spark.ui.enabled=true", "spark.ui.port=0"])
        try:
            service_ready(service)
            service_tree = process_tree(service.pid)
            service_sockets = listening_sockets(service_tree)
            service_jvm = _jvm_pid(service_tree)
            assert len([s for s in service_sockets if s[0] == service_jvm]) >= 3, service_sockets  # RPC, blocks, UI
            assert [s for s in service_sockets if not _loopback(s[1])] == [], service_sockets
        finally:
            stop_process(service)
    finally:
        stop_process(proc)


@pytest.mark.integration
def _rpc_reaches(spark, host: str, port: int) -> bool:
    """Whether a process with no credentials gets an endpoint of the driver at ``host:port`` over
    Spark's own RPC (the way the block manager's blocks were listed and downloaded): an RpcEnv in
    this test's JVM, with no secret."""
    jvm = spark.sparkContext._jvm
    conf = (jvm.org.apache.spark.SparkConf(False).set("spark.rpc.lookupTimeout", "10s")
            .set("spark.rpc.askTimeout", "10s").set("spark.network.timeout", "10s"))
    manager = spark.sparkContext._jsc.sc().env().securityManager()  # this JVM's: no authentication, no secret
    env = jvm.org.apache.spark.rpc.RpcEnv.create("no-credentials", "127.0.0.1", 0, conf, manager, True)
    try:
        env.setupEndpointRefByURI(f"spark://BlockManagerMaster@{host}:{port}")
        return True
    except Exception:  # noqa: BLE001 - refused: the driver asks for the application's secret
        return False
    finally:
        env.shutdown()


def test_a_wider_driver_bind_runs_with_authentication_on(tmp_path, reader_password_file, spark):
    port = free_port()
    proc = start_server_process(tmp_path / "home", port, [
        f"tierlake.gateway.password-file={reader_password_file}", "tierlake.tiering.workers=0",
        *(f"{k}={v}" for k, v in WIDE.items())])
    try:
        tree = process_tree(proc.pid)
        jvm = _jvm_pid(tree)
        wide = [s for s in listening_sockets(tree) if not _loopback(s[1])]
        assert len(wide) == 2 and {s[0] for s in wide} == {jvm}, wide  # the driver's RPC and block manager
        # Raw RPC with no credentials: this test's own driver (loopback, no authentication) answers it,
        # the widened server's does not.
        own = spark.sparkContext.getConf()
        assert _rpc_reaches(spark, own.get("spark.driver.host"), int(own.get("spark.driver.port")))
        assert not any(_rpc_reaches(spark, "127.0.0.1", s[2]) for s in wide)
        with _login(port, "ann") as admin:
            cur = admin.cursor()
            settings = dict(_rows(cur, "SET"))
            assert settings["spark.authenticate"] == "true" and settings["spark.network.crypto.enabled"] == "true"
            assert settings["spark.authenticate.secret"] == "*********(redacted)"
            # A job with a shuffle: executors fetch blocks through the authenticated block manager.
            assert _rows(cur, "SELECT count(*) FROM range(100) GROUP BY id % 3 ORDER BY 1") == [(33,), (33,), (34,)]
        with _login(port, "rita") as reader:
            assert _rows(reader.cursor(), "SET spark.authenticate.secret") == [
                ("spark.authenticate.secret", "*********(redacted)")]
        assert b"spark.authenticate.secret" not in Path(f"/proc/{jvm}/cmdline").read_bytes()
        log_text = "".join(p.read_text(errors="replace") for p in (tmp_path / "home" / "logs").glob("*.log"))
        assert "not loopback" in log_text
    finally:
        stop_process(proc)


# --- what a reader's SET shows -------------------------------------------------------------------


def _internal_values(server) -> dict[str, str]:
    conf = server.spark.sparkContext.getConf()
    values = {key: conf.get(key) for key in ("spark.driver.host", "spark.driver.port", "spark.driver.bindAddress",
                                             "spark.hadoop.hive.server2.thrift.port")}
    values["thrift port"] = str(server.thrift_port)
    values["home"] = str(server.config.home)
    values["block manager port"] = str(
        server.spark.sparkContext._jsc.sc().env().blockManager().blockManagerId().port())
    return {k: v for k, v in values.items() if v}


def _leaks(rows, internal: dict[str, str]) -> list:
    out = []
    for row in rows:
        key, value = row[0], str(row[1])
        for what, secret in internal.items():
            if value == secret or (not secret.isdigit() and secret in value):
                out.append((key, value, what))
    return out


def test_a_readers_set_shows_no_host_port_path_or_secret(server, auth_gateway):
    internal = _internal_values(server)
    assert {"spark.driver.host", "spark.driver.port", "home", "block manager port"} <= internal.keys()
    with _login(auth_gateway.port, "rita") as conn:
        cur = conn.cursor()
        listing = _rows(cur, "SET")
        assert dict(listing)["spark.driver.port"] == "*********(redacted)"
        assert _leaks(listing, internal) == []
        assert [(k, v) for k, v in listing if re.search(r"^/|file:|://|\d+[.]\d+[.]\d+[.]\d+", v)] == []
        for key in ("spark.driver.host", "spark.driver.port", "spark.driver.bindAddress", "spark.sql.warehouse.dir",
                    "spark.hadoop.hive.server2.thrift.port", "spark.hadoop.hive.server2.thrift.bind.host",
                    "spark.driver.extraJavaOptions", "spark.driver.extraClassPath", "spark.jars",
                    "spark.hadoop.javax.jdo.option.ConnectionURL", "spark.scheduler.allocation.file",
                    "spark.authenticate.secret"):
            rows = _rows(cur, f"SET {key}")
            assert rows[0][1] in ("*********(redacted)", "<undefined>"), rows
        # SET -v lists every SQL setting Spark defines, unredacted (the warehouse path among them): admin only.
        with pytest.raises(hive_exc.OperationalError) as info:
            cur.execute("SET -v")
        message = info.value.args[0].status.errorMessage
        assert "SET -v" in message and "admin" in message, message
        assert _rows(cur, "SET spark.sql.shuffle.partitions")  # the session goes on
