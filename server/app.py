"""The tierlake server: Spark + sys schema + Spark Thrift Server + gateway."""

from __future__ import annotations

import importlib
import logging
import threading
import time
from typing import Any

from procedures.registry import Context, Registry, load_builtins, registry as default_registry
from server import migrations
from server.config import Config
from server.coordinator import Coordinator
from server.durations import parse_duration
from server.exceptions import ConfigError
from server.handler import CallHandler
from server.session import HomeLock, build_spark, free_port, start_metastore_service, start_thrift_server

log = logging.getLogger("tierlake.server")


def load_extensions(config: Config) -> list[str]:
    """Import the modules named in ``tierlake.extensions`` (comma-separated)."""
    names = [n.strip() for n in (config.get("tierlake.extensions") or "").split(",") if n.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"cannot import extension module {name!r}: {e}") from e
    return names


class Server:
    """One tierlake server process. ``start()`` returns when clients can connect."""

    def __init__(self, config: Config, registry: Registry | None = None):
        self.config = config
        self.registry = registry or default_registry
        self.spark: Any = None
        self.gateway: Any = None
        self.thrift_server: Any = None
        self.thrift_port: int | None = None
        self.coordinator: Coordinator | None = None
        self.workers: list = []
        self.kv_maintenance: Any = None
        self.metastore_uri: str | None = None
        self._lock = HomeLock(config.home)
        self._stopped = threading.Event()

    # The JDBC URL clients use.
    @property
    def jdbc_url(self) -> str:
        return f"jdbc:hive2://{self.config.get('tierlake.gateway.host')}:{self.gateway.port}/default"

    def context(self, user: str | None = None) -> Context:
        return Context(spark=self.spark, config=self.config, user=user, extras={"server": self})

    def start(self) -> "Server":
        started = time.monotonic()
        self._lock.acquire()
        try:
            load_builtins()
            load_extensions(self.config)
            self.thrift_port = self.config.get_int("tierlake.thrift.internal-port", 0) or free_port()
            self.spark = build_spark(self.config, self.thrift_port)
            applied = migrations.migrate(self.spark)
            views = migrations.create_views(self.spark)
            count = migrations.refresh_procedure_catalog(self.spark, self.registry)
            log.info(
                "sys schema at version %d (applied now: %s); views: %s; %d procedures",
                migrations.schema_version(self.spark), applied or "none", ", ".join(views), count,
            )
            self.coordinator = Coordinator(self.spark, self.config)
            self._recover_ctas()
            self.coordinator.start_ticker(
                parse_duration(self.config.get("tierlake.coordinator.interval", "5 s"), "tierlake.coordinator.interval")
            )
            self.thrift_server = start_thrift_server(self.spark)
            metastore_port = self.config.get("tierlake.metastore.port") or ""
            if metastore_port.strip():
                port = start_metastore_service(self.spark, self.config, int(metastore_port))
                self.metastore_uri = f"thrift://127.0.0.1:{port}"
            self._start_gateway()
            from server.tiering.worker import start_workers

            self.workers = start_workers(self, self.config.get_int("tierlake.tiering.workers", 1))
            from server.tiering.kvmaintenance import KvMaintenance

            self.kv_maintenance = KvMaintenance(self)
            self.kv_maintenance.start()
        except BaseException:
            self.stop()
            raise
        log.info("ready in %.1fs: %s", time.monotonic() - started, self.jdbc_url)
        return self

    def _recover_ctas(self) -> None:
        """Roll back CREATE TABLE … AS SELECT statements a previous run left unfinished."""
        from server.ctas import recover

        for outcome in recover(self.context("tierlake")):
            log.warning("unfinished CREATE TABLE %s.%s AS SELECT (%s) from the previous run: %s",
                        outcome["database_name"], outcome["table_name"], outcome["ctas_id"], outcome["state"])

    def _start_gateway(self) -> None:
        from server.gateway.server import Gateway

        handler = CallHandler(self.registry, self.context)
        self.gateway = Gateway(
            host=self.config.get("tierlake.gateway.host"),
            port=self.config.get_int("tierlake.gateway.port"),
            backend_host="127.0.0.1",
            backend_port=self.thrift_port,
            handler=handler,
            auth=(self.config.get("tierlake.gateway.auth") or "PLAIN").upper(),
        )
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
        for step, action in (
            ("KV maintenance", lambda: self.kv_maintenance and self.kv_maintenance.stop()),
            ("tiering workers", self._stop_workers),
            ("gateway", lambda: self.gateway and self.gateway.stop()),
            ("scheduler", lambda: self.coordinator and self.coordinator.stop()),
            ("thrift server", lambda: self.thrift_server and self.thrift_server.stop()),
            ("spark", lambda: self.spark and self.spark.stop()),
        ):
            try:
                action()
            except Exception:  # noqa: BLE001 - keep stopping the rest
                log.exception("error stopping the %s", step)
        self._lock.release()
        log.info("stopped")
