"""``tierlake tiering-service``: extra tiering capacity as its own Spark app.

It talks to the coordinator only through procedures over JDBC, and reaches
the catalog either directly in the shared PostgreSQL metastore
(``tierlake.metastore.url``, like the server) or through the server's
metastore service (``tierlake.metastore.port`` on the server).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tierlake.server.changelog import fresh_view
from tierlake.server.clients.procedure_client import JdbcClient
from tierlake.server.config.config import Config
from tierlake.server.exceptions import ConfigError
from tierlake.server.metastore.database import metastore_db
from tierlake.server.observability.http import ObservabilityHttp
from tierlake.server.runtime.javaext import JvmFeature
from tierlake.server.runtime.session import HomeLock, build_spark, free_port
from tierlake.server.tiering.worker import Worker, persistent_job_id

log = logging.getLogger("tierlake.tiering")
METASTORE_URIS = "spark.hadoop.hive.metastore.uris"


class TieringService:
    def __init__(self, config: Config, url: str, features: Sequence[JvmFeature], user: str = "tiering-service",
                 password: str | None = None, ca_file: str | None = None):
        """``features``: what each feature adds to Spark (the composition root's ``JVM_FEATURES``)."""
        self.config, self.url, self.features = config, url, tuple(features)
        self.client = JdbcClient(url, user, password, ca_file)
        self.lock = HomeLock(config.home)
        self.spark: Any = None
        self.workers: list[Worker] = []
        self.http: Any = None  # its own /metrics (its rounds), when tierlake.http.port is set

    def start(self, count: int) -> TieringService:
        self.lock.acquire()
        try:
            info = dict(self.client.call("server_info"))
            if METASTORE_URIS not in self.config.values and not metastore_db(self.config).shared:
                if info.get("metastore_url"):
                    # The password is this process's own setting: never sent by the server.
                    raise ConfigError(
                        f"the server at {self.url} uses the shared metastore {info['metastore_url']}: "
                        f"start this service with --conf tierlake.metastore.url={info['metastore_url']} "
                        "(and tierlake.metastore.user / tierlake.metastore.password)"
                    )
                if not info.get("metastore_uri"):
                    raise ConfigError(
                        f"the server at {self.url} does not share its metastore: start it with "
                        "--conf tierlake.metastore.port=9083 (or give both a shared metastore with "
                        f"--conf {METASTORE_URIS}=thrift://…)"
                    )
                self.config.values[METASTORE_URIS] = info["metastore_uri"]
            if info.get("warehouse"):
                self.config.values.setdefault("spark.sql.warehouse.dir", info["warehouse"])
            self.spark = build_spark(self.config, free_port(), self.features, owns_metastore=False)
            for n in range(count):
                job_id = persistent_job_id(self.config.home, f"tiering-service-{n}")
                worker = Worker(self.spark, self.client, job_id, self.config)
                worker.start()
                self.workers.append(worker)
            port = self.config.int("tierlake.http.port")
            if port is not None:
                # No status page: the tables are the server's. No login either: this process has no users.
                self.http = ObservabilityHttp(self.config.text("tierlake.gateway.host"), port).start()
        except BaseException:
            self.stop()
            raise
        log.info("tiering service ready: jobs %s, coordinator %s", [w.job_id for w in self.workers], self.url)
        return self

    def stop(self) -> None:
        if self.http is not None:
            self.http.stop()
        for worker in self.workers:
            worker.stop()
        for worker in self.workers:
            worker.join(timeout=60)
        fresh_view.stop_repins()  # before Spark stops: pending re-pins run
        if self.spark is not None:
            self.spark.stop()
            self.spark = None
        self.lock.release()
        log.info("stopped")
