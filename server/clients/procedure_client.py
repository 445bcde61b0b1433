"""How a tiering worker talks to the coordinator: the same procedures, either
called in-process (workers inside ``tierlake server``) or as ``CALL``
statements over JDBC (``tierlake tiering-service`` processes)."""

from __future__ import annotations

import threading
from typing import Any

from tierlake import sql

T_CALL = "templates/call.sql.j2"


class LocalClient:
    def __init__(self, server: Any):
        self.server = server

    def call(self, procedure: str, **arguments: Any) -> list[tuple]:
        from tierlake.procedures.types import SqlMap, SqlStruct

        def convert(value):
            if isinstance(value, list):
                return [convert(v) for v in value]
            if isinstance(value, SqlMap):
                return SqlMap({k: convert(v) for k, v in value.items()})
            if isinstance(value, dict):
                return SqlStruct({k: convert(v) for k, v in value.items()})
            return value

        proc = self.server.registry.get(procedure)
        return proc.invoke(self.server.context("tiering-service"), [], {k: convert(v) for k, v in arguments.items()})


class JdbcClient:
    """One PyHive connection per thread (HiveServer2 connections are not thread-safe)."""

    def __init__(self, url: str, user: str = "tiering-service", password: str | None = None,
                 ca_file: str | None = None):
        from tierlake.server.clients.jdbc import parse_jdbc_url

        parse_jdbc_url(url)  # a bad URL fails here, not in the first heartbeat
        self.url, self.user, self.password, self.ca_file = url, user, password, ca_file
        self._local = threading.local()

    def _cursor(self):
        from tierlake.server.clients.jdbc import connect

        if getattr(self._local, "conn", None) is None:
            self._local.conn = connect(self.url, self.user, self.password, self.ca_file)
        return self._local.conn.cursor()

    def call(self, procedure: str, **arguments: Any) -> list[tuple]:
        try:
            cursor = self._cursor()
            cursor.execute(sql.render(T_CALL, procedure=procedure, arguments=arguments))
            return [tuple(r) for r in cursor.fetchall()]
        except Exception:
            self._local.conn = None  # reconnect next time
            raise
