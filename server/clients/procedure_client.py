"""The one procedure client: ``CALL sys.*`` from Python, in-process or over JDBC.

A transport runs one procedure and returns its rows:

- :class:`LocalClient` calls the server's registry in-process (tiering
  workers inside ``tierlake server``, ``Admin.local``);
- :class:`JdbcClient` sends the same ``CALL`` statement (``templates/call.sql.j2``)
  through the gateway (``tierlake tiering-service`` processes, ``Admin.connect``).

:class:`Admin` is the typed API on top, after Fluss's ``Admin.listTieringStatuses()``.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from tierlake import sql

T_CALL = "templates/call.sql.j2"


class Transport(Protocol):
    def call(self, procedure: str, **arguments: Any) -> list[tuple]: ...


class LocalClient:
    """Calls procedures in the server's own registry, as ``user``."""

    def __init__(self, server: Any, user: str | None = "tiering-service"):
        self.server = server
        self.user = user

    def call(self, procedure: str, **arguments: Any) -> list[tuple]:
        from tierlake.server.sqlapi.types import SqlMap, SqlStruct

        # The values a CALL statement would parse to: plain dicts are named_structs.
        def convert(value):
            if isinstance(value, list):
                return [convert(v) for v in value]
            if isinstance(value, SqlMap):
                return SqlMap({k: convert(v) for k, v in value.items()})
            if isinstance(value, dict):
                return SqlStruct({k: convert(v) for k, v in value.items()})
            return value

        proc = self.server.registry.get(procedure)
        return proc.invoke(self.server.context(self.user), [], {k: convert(v) for k, v in arguments.items()})

    def close(self) -> None:
        pass


class JdbcClient:
    """One PyHive connection per thread (HiveServer2 connections are not thread-safe)."""

    def __init__(self, url: str, user: str = "tiering-service", password: str | None = None,
                 ca_file: str | None = None):
        from tierlake.server.clients.jdbc import parse_jdbc_url

        parse_jdbc_url(url)  # a bad URL fails here, not in the first heartbeat
        self.url, self.user, self.password, self.ca_file = url, user, password, ca_file
        self._local = threading.local()
        self._open: list[Any] = []
        self._open_lock = threading.Lock()

    def connect(self) -> Any:
        """This thread's connection, logging in if it has none yet."""
        from tierlake.server.clients.jdbc import connect

        if getattr(self._local, "conn", None) is None:
            self._local.conn = connect(self.url, self.user, self.password, self.ca_file)
            with self._open_lock:
                self._open.append(self._local.conn)
        return self._local.conn

    def call(self, procedure: str, **arguments: Any) -> list[tuple]:
        try:
            cursor = self.connect().cursor()
            rows = None
            try:
                cursor.execute(sql.render(T_CALL, procedure=procedure, arguments=arguments))
                rows = [tuple(r) for r in cursor.fetchall()]
            finally:
                if rows is None:
                    with contextlib.suppress(Exception):  # the call's own error is the one to report
                        cursor.close()
                else:
                    cursor.close()
            return rows
        except Exception:
            self._forget()  # reconnect next time
            raise

    def _forget(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        with self._open_lock:
            if conn in self._open:
                self._open.remove(conn)

    def close(self) -> None:
        """Close every connection this client opened (from any thread)."""
        with self._open_lock:
            conns, self._open = self._open, []
        for conn in conns:
            conn.close()


@dataclass(frozen=True)
class TableTieringStatus:
    """One table's tiering status (the columns of ``sys.lake_tiering_status``)."""

    database_name: str
    table_name: str
    status: str
    tiering_epoch: int
    last_tiered_time: datetime | None
    last_error: str | None
    last_error_time: datetime | None

    @property
    def table_path(self) -> str:
        return f"{self.database_name}.{self.table_name}"


def _timestamp(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value if value is None or value.tzinfo else value.replace(tzinfo=timezone.utc)
    # Over JDBC timestamps arrive as text in the server's zone (UTC).
    return datetime.fromisoformat(str(value)).replace(tzinfo=timezone.utc)


def _status(row: tuple) -> TableTieringStatus:
    db, table, status, epoch, tiered, error, error_time = row
    return TableTieringStatus(db, table, status, int(epoch), _timestamp(tiered), error, _timestamp(error_time))


class Admin:
    """Administrative calls against one tierlake server, over any transport."""

    def __init__(self, client: Transport):
        self.client = client

    @classmethod
    def local(cls, server: Any, user: str | None = None) -> Admin:
        return cls(LocalClient(server, user))

    @classmethod
    def connect(cls, url: str, user: str | None = None, password: str | None = None,
                ca_file: str | None = None) -> Admin:
        client = JdbcClient(url, user or "admin", password, ca_file)
        client.connect()  # log in now: bad credentials fail here, not at the first call
        return cls(client)

    def list_tiering_statuses(self, table_path: str | None = None) -> list[TableTieringStatus]:
        """Every registered table's tiering status, or one table's."""
        return [_status(r) for r in self.client.call("list_tiering_statuses", table=table_path)]

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
