"""The tierlake server: Spark + sys schema + Spark Thrift Server + gateway."""

from __future__ import annotations

import errno
import importlib
import logging
import secrets
import socket
import threading
import time
from typing import Any

from tierlake.procedures import load_builtins
from tierlake.server.bounds import jvm_watch, resource_bounds
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog import jvm as changelog_jvm
from tierlake.server.config.config import Config
from tierlake.server.coordinator.coordinator import Coordinator
from tierlake.server.exceptions import ConfigError, PortInUseError
from tierlake.server.gateway.auth import jvm as authz_jvm
from tierlake.server.gateway.auth.authz import Authorizer, SparkSessions
from tierlake.server.gateway.auth.passwords import PasswordFile
from tierlake.server.gateway.routing.handler import MAX_CALL_SIZE, CallHandler, DdlHandler
from tierlake.server.gateway.routing.ingest import IngestHandler, SessionSettings
from tierlake.server.gateway.routing.router import Router
from tierlake.server.gateway.routing.sys_reads import SysReads
from tierlake.server.gateway.transport.server import Gateway
from tierlake.server.gateway.transport.settings import GatewaySettings
from tierlake.server.ingest import ledger
from tierlake.server.ingest.request_ids import RequestKeys
from tierlake.server.ingest.writer import StreamWriter
from tierlake.server.maintenance.kv_tables import KvMaintenance
from tierlake.server.metastore import jvm as metastore_jvm
from tierlake.server.metastore.service import start_metastore_service
from tierlake.server.observability import metrics, sources
from tierlake.server.observability.http import ObservabilityHttp
from tierlake.server.runtime.session import HomeLock, build_spark, free_port, start_thrift_server
from tierlake.server.sqlapi import functions as sql_functions
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.registry import Registry
from tierlake.server.sqlapi.registry import default as default_registry
from tierlake.server.state import migrations
from tierlake.server.state.housekeeping import Housekeeper
from tierlake.server.tiering.backlog import BacklogProbe
from tierlake.server.tiering.ctas import recover as recover_ctas
from tierlake.server.tiering.worker import start_workers
from tierlake.udfs import load_builtins as load_udfs

log = logging.getLogger("tierlake.server")
# What each feature adds to the Spark the server (and a tiering service) runs: settings,
# session extensions (in this order), class path, a step once it is up (runtime/javaext.py).
JVM_FEATURES = (metastore_jvm.FEATURE, resource_bounds.FEATURE, authz_jvm.FEATURE, changelog_jvm.FEATURE)
HTTP_PORT_REMEDY = "start the status page on another port with --conf tierlake.http.port=N"
# How long a stop waits for statements already running to end and be answered.
GATEWAY_DRAIN_S = 30.0


def gateway_from_config(config: Config, handler: Any, backend_port: int, registry: Any = None,
                        on_session_opened: Any = None, backend_secret: str | None = None):
    """The gateway as configured: auth mode, password file (roles), TLS."""
    import ipaddress
    import ssl

    host = config.text("tierlake.gateway.host")
    password_file = config.text("tierlake.gateway.password-file")
    auth = config.choice("tierlake.gateway.auth")
    if password_file and auth == "NOSASL":
        raise ConfigError("tierlake.gateway.auth=NOSASL cannot check passwords; "
                          "use PLAIN with tierlake.gateway.password-file")
    authorizer = Authorizer(PasswordFile(password_file) if password_file else None, registry,
                            config.int("tierlake.gateway.max-statement-size"))
    if not password_file:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            log.warning("development mode (no tierlake.gateway.password-file) on %s: anyone who can reach "
                        "the gateway may do everything", host)
    context = None
    certfile = config.text("tierlake.gateway.ssl.certfile")
    if certfile:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(certfile, config.text("tierlake.gateway.ssl.keyfile") or None)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot load the gateway's TLS certificate {certfile}: {e}") from None
    try:
        return Gateway(GatewaySettings.from_config(config, backend_port, backend_secret, context), handler,
                       authorizer=authorizer, on_session_opened=on_session_opened)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def load_extensions(config: Config) -> list[str]:
    """Import the modules named in ``tierlake.extensions`` (comma-separated)."""
    names = config.items("tierlake.extensions")
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"cannot import extension module {name!r}: {e}") from e
    return names


def check_port_free(host: str, port: int | None, remedy: str | None = None) -> None:
    """Raise :class:`PortInUseError` if nothing could listen on ``host:port`` (0 or None: any port);
    ``remedy`` says how to choose another (default: the gateway's ``--port``)."""
    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        socket.create_server((host, port), family=family).close()
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            return  # the listener's own bind reports anything else
        raise PortInUseError(
            f"port {port} on {host} is in use (another tierlake server?); stop it, or "
            + (remedy or "start this one on another port with --port N (tierlake.gateway.port)")) from None


class Server:
    """One tierlake server process. ``start()`` returns when clients can connect."""

    def __init__(self, config: Config, registry: Registry | None = None):
        self.config = config
        self.registry = registry or default_registry
        self.spark: Any = None
        self.gateway: Any = None
        self.thrift_server: Any = None
        self.thrift_port: int | None = None
        # The internal Spark Thrift Server's only password (the gateway's).
        self.internal_secret = secrets.token_urlsafe(32)
        self.coordinator: Coordinator | None = None
        self.workers: list = []
        self.kv_maintenance: Any = None
        self.backlog_probe: Any = None
        self.housekeeper: Any = None
        self.http: Any = None  # the status page and /metrics (server/observability), when on
        self.metastore_uri: str | None = None
        self._lock = HomeLock(config.home)
        self._stopped = threading.Event()

    # The JDBC URL clients use.
    @property
    def jdbc_url(self) -> str:
        tls = ";ssl=true" if self.gateway.settings.ssl_context is not None else ""
        return f"jdbc:hive2://{self.config.text('tierlake.gateway.host')}:{self.gateway.port}/default{tls}"

    def context(self, user: str | None = None) -> Context:
        """What a procedure run on behalf of ``user`` gets (built per call: workers and ports change)."""
        return Context(spark=self.spark, config=self.config, user=user, coordinator=self.coordinator,
                       registry=self.registry, jdbc_url=self.jdbc_url if self.gateway else None,
                       metastore_uri=self.metastore_uri, tiering_workers=len(self.workers))

    def start(self) -> Server:
        started = time.monotonic()
        self._lock.acquire()
        try:
            load_builtins()
            load_udfs()
            load_extensions(self.config)
            self.thrift_port = self.config.int("tierlake.thrift.internal-port") or free_port()
            # Built (not started) before Spark: a bad password file or certificate fails fast.
            self.gateway = gateway_from_config(self.config, self._handler(),
                                               self.thrift_port, self.registry,
                                               on_session_opened=self._session_opened,
                                               backend_secret=self.internal_secret)
            check_port_free(self.gateway.host, self.gateway.port)  # and a taken port, before a minute of start
            check_port_free(self.config.text("tierlake.gateway.host"), self.config.int("tierlake.http.port"),
                            HTTP_PORT_REMEDY)  # the status page's too
            self.spark = build_spark(self.config, self.thrift_port, JVM_FEATURES)
            jvm_watch.watch(self._stopped)  # one life: the process ends with its JVM
            log.info("SQL functions: %s", ", ".join(sql_functions.functions.register_into(self.spark)) or "none")
            applied = migrations.migrate(self.spark)
            views = migrations.create_views(self.spark, self.config)
            count = migrations.refresh_procedure_catalog(self.spark, self.registry)
            ledger.configure(self.spark, self.config)  # request ids outlive their stream snapshots
            log.info(
                "sys schema at version %d (applied now: %s); views: %s; %d procedures",
                migrations.schema_version(self.spark), applied or "none", ", ".join(views), count,
            )
            self.coordinator = Coordinator(self.spark, self.config)
            metrics.TABLES.publish_states(self.coordinator.load()[1].values())  # later: after every commit
            self._recover_ctas()
            self.coordinator.start_ticker(self.config.duration("tierlake.coordinator.interval"))
            # Bounded sys state (docs/design.md, 'Running for months').
            self.housekeeper = Housekeeper(self.spark, self.config)
            self.housekeeper.start()
            self.backlog_probe = BacklogProbe(self.spark, self.coordinator)
            probe_every = self.config.duration("tierlake.tiering.lag-probe-interval").total_seconds()
            if probe_every > 0:
                self.backlog_probe.start(probe_every)
            self.thrift_server = start_thrift_server(self.spark, self.internal_secret)
            self.gateway.authorizer.attach(SparkSessions(self.spark, self.thrift_server))
            metastore_port = self.config.int("tierlake.metastore.port")
            if metastore_port is not None:
                port = start_metastore_service(self.spark, self.config, metastore_port)
                self.metastore_uri = f"thrift://127.0.0.1:{port}"
            self._start_gateway()
            self.http = self._start_http()
            self.workers = start_workers(self, self.config.int("tierlake.tiering.workers"))
            self.kv_maintenance = KvMaintenance(self)
            self.kv_maintenance.start()
        except BaseException:
            self.stop()
            raise
        log.info("ready in %.1fs: %s", time.monotonic() - started, self.jdbc_url)
        return self

    def _start_http(self) -> Any:
        """The status page and /metrics on ``tierlake.http.port`` (docs/observability.md), or None when off."""
        port = self.config.int("tierlake.http.port")
        host = self.config.text("tierlake.gateway.host")
        if port is None:
            if self.gateway.authorizer.enabled:
                return None  # production mode: only where the operator asked for it
            host, port = "127.0.0.1", 0  # development mode: on, but only for this machine
        metrics.watch_sessions(lambda: self.gateway.session_count if self.gateway is not None else 0)
        source = sources.server_source(self.spark, self.coordinator.rounds_table)
        try:
            return ObservabilityHttp(host, port, self.gateway.authorizer, source,
                                     self.gateway.settings.ssl_context).start()
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            raise PortInUseError(f"port {port} on {host} is in use; {HTTP_PORT_REMEDY}") from None

    def _recover_ctas(self) -> None:
        """Roll back CREATE TABLE … AS SELECT statements a previous run left unfinished."""
        for outcome in recover_ctas(self.context("tierlake")):
            log.warning("unfinished CREATE TABLE %s.%s AS SELECT (%s) from the previous run: %s",
                        outcome["database_name"], outcome["table_name"], outcome["ctas_id"], outcome["state"])

    def _handler(self) -> Router:
        """The gateway's routes, in the order they are asked (server/gateway/routing/router.py)."""
        sessions = lambda: self.gateway.authorizer.sessions if self.gateway else None  # noqa: E731
        settings = SessionSettings(RequestKeys.load(self.config.home))
        reads = SysReads(lambda: self.spark, lambda: ("127.0.0.1", self.thrift_port, self.internal_secret),
                         max_age_s=self.config.duration("tierlake.gateway.status-cache.max-age").total_seconds(),
                         enabled=self.config.flag("tierlake.gateway.status-cache"), sessions=sessions)
        return Router([settings, IngestHandler(sessions, StreamWriter()),
                       CallHandler(self.registry, self.context, self.config.int(MAX_CALL_SIZE)),
                       DdlHandler(self.context), reads], settings=settings)

    def _session_opened(self, guid: bytes, secret: bytes) -> None:
        """Every JDBC session is its own SparkSession: give it the UDFs before its client can use it."""
        if self.thrift_server is not None:
            sql_functions.functions.register_into_thrift_session(self.thrift_server, guid, secret)

    def _start_gateway(self) -> None:
        self.gateway.start()

    def _stop_workers(self) -> None:
        for worker in self.workers:
            worker.stop()
        for worker in self.workers:
            worker.join(timeout=60)

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.info("stopping: no new statements; finishing the running ones and the running rounds")
        for step, action in (
            # First: no new work, and every statement already running answered (committed → success).
            ("gateway", lambda: self.gateway and self.gateway.drain(GATEWAY_DRAIN_S)),
            ("status page", lambda: self.http and self.http.stop()),
            ("KV maintenance", lambda: self.kv_maintenance and self.kv_maintenance.stop()),
            ("tiering workers", self._stop_workers),
            ("fresh-view re-pins", fresh_view.stop_repins),
            ("gateway", lambda: self.gateway and self.gateway.stop()),
            ("scheduler", lambda: self.coordinator and self.coordinator.stop()),
            ("backlog probe", lambda: self.backlog_probe and self.backlog_probe.stop()),
            ("sys housekeeping", lambda: self.housekeeper and self.housekeeper.stop()),
            ("thrift server", lambda: self.thrift_server and self.thrift_server.stop()),
            ("spark", lambda: self.spark and self.spark.stop()),
        ):
            try:
                action()
            except Exception:
                log.exception("error stopping the %s", step)
        self._lock.release()
        log.info("stopped")
