"""This server's metastore over Hive's Thrift protocol on 127.0.0.1.

Embedded Derby admits one JVM; ``tierlake tiering-service`` processes reach
the same catalog through this (``hive.metastore.uris``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from tierlake.server.config.config import Config
from tierlake.server.exceptions import MigrationError
from tierlake.server.metastore.database import metastore_db
from tierlake.server.runtime.session import LOOPBACK, free_port

log = logging.getLogger("tierlake.session")


def _serve_metastore_on_loopback(spark: Any, hconf: Any, port: int) -> bool:
    """HiveMetaStore.startMetaStore's plain set-up (set_ugi, binary protocol),
    with its server socket on 127.0.0.1: Hive 2.3 opens it on every address
    (HiveAuthUtils.getServerSocket(null, port)) and never reads
    hive.metastore.thrift.bind.host. False, serving nothing, when the
    configuration asks for a transport only Hive's own start-up builds."""
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    conf_vars = getattr(jvm.org.apache.hadoop.hive.conf, "HiveConf$ConfVars")
    if (any(hconf.getBoolVar(getattr(conf_vars, name)) for name in (
            "METASTORE_USE_THRIFT_SASL", "METASTORE_USE_THRIFT_FRAMED_TRANSPORT",
            "METASTORE_USE_THRIFT_COMPACT_PROTOCOL", "HIVE_METASTORE_USE_SSL"))
            or not hconf.getBoolVar(conf_vars.METASTORE_EXECUTE_SET_UGI)):
        return False
    metastore = "org.apache.hadoop.hive.metastore."
    # What startMetaStore sets first: handlers take a client's address from its connection.
    remote = jvm.java.lang.Class.forName(metastore + "HiveMetaStore").getDeclaredField("isMetaStoreRemote")
    remote.setAccessible(True)
    remote.setBoolean(None, True)
    max_message = hconf.getLongVar(conf_vars.METASTORESERVERMAXMESSAGESIZE)
    base = getattr(jvm.org.apache.hadoop.hive.metastore, "HiveMetaStore$HMSHandler")(
        "new db based metaserver", hconf, False)
    handler = jvm.org.apache.hadoop.hive.metastore.HiveMetaStore.newRetryingHMSHandler(base, hconf)
    server_socket = jvm.org.apache.thrift.transport.TServerSocket(jvm.java.net.InetSocketAddress(LOOPBACK, port))
    if hconf.getBoolVar(conf_vars.METASTORE_TCP_KEEP_ALIVE):
        server_socket = jvm.org.apache.hadoop.hive.metastore.TServerSocketKeepAlive(server_socket)
    protocol = getattr(jvm.org.apache.thrift.protocol, "TBinaryProtocol$Factory")
    args = getattr(jvm.org.apache.thrift.server, "TThreadPoolServer$Args")(server_socket)
    args.processor(jvm.org.apache.hadoop.hive.metastore.TUGIBasedProcessor(handler))
    args.transportFactory(getattr(jvm.org.apache.hadoop.hive.thrift, "TUGIContainingTransport$Factory")())
    args.protocolFactory(protocol())
    args.inputProtocolFactory(protocol(True, True, max_message, max_message))
    args.minWorkerThreads(hconf.getIntVar(conf_vars.METASTORESERVERMINTHREADS))
    args.maxWorkerThreads(hconf.getIntVar(conf_vars.METASTORESERVERMAXTHREADS))
    server = jvm.org.apache.thrift.server.TThreadPoolServer(args)
    # Hive's per-connection clean-up (each connection's RawStore is shut down when it closes),
    # an anonymous class with a package-private constructor.
    events = jvm.java.lang.Class.forName(metastore + "HiveMetaStore$3").getDeclaredConstructor(
        gateway.new_array(jvm.java.lang.Class, 0))
    events.setAccessible(True)
    server.setServerEventHandler(events.newInstance(gateway.new_array(jvm.java.lang.Object, 0)))
    server.serve()
    return True


def start_metastore_service(spark: Any, config: Config, port: int) -> int:
    """Serve this server's metastore over Hive's Thrift protocol on 127.0.0.1.

    Embedded Derby admits one JVM; ``tierlake tiering-service`` processes
    reach the same catalog through this (``hive.metastore.uris``).
    """
    jvm = spark.sparkContext._jvm
    port = port or free_port()
    hconf = jvm.org.apache.hadoop.hive.conf.HiveConf(
        spark.sparkContext._jsc.hadoopConfiguration(),
        jvm.java.lang.Class.forName("org.apache.hadoop.hive.conf.HiveConf"),
    )
    metastore_db(config).hive_conf(hconf)
    hconf.set("hive.metastore.thrift.bind.host", "127.0.0.1")
    bridge = jvm.org.apache.hadoop.hive.shims.ShimLoader.getHadoopThriftAuthBridge()

    def serve() -> None:
        try:
            if not _serve_metastore_on_loopback(spark, hconf, port):
                log.warning("the metastore service listens on every address (Hive's SASL, SSL or framed "
                            "transport is configured, which only HiveMetaStore.startMetaStore sets up)")
                jvm.org.apache.hadoop.hive.metastore.HiveMetaStore.startMetaStore(port, bridge, hconf)
        except Exception:
            log.exception("metastore service stopped")

    threading.Thread(target=serve, name="tierlake-metastore", daemon=True).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            log.info("metastore service on thrift://127.0.0.1:%d", port)
            return port
        except OSError:
            time.sleep(0.2)
    raise MigrationError(f"the metastore service did not start on port {port}")
