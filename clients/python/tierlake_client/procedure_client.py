"""The procedure client: ``CALL sys.*`` from Python over the gateway.

A transport runs one procedure and returns its rows. :class:`JdbcClient` sends
the ``CALL`` statement (names checked, values quoted as Spark literals by
:func:`tierlake_client.sqltext.call_statement`) through the gateway; it is what
``tierlake tiering-service`` processes and ``Admin.connect`` use. Inside the
server, ``tierlake.server.clients.procedure_client.LocalClient`` calls the
registry in-process with the same arguments.

:class:`Admin` is the typed API on top, after Fluss's ``Admin.listTieringStatuses()``:

    with Admin.connect("jdbc:hive2://127.0.0.1:10000/default", "admin", "secret") as admin:
        for status in admin.list_tiering_statuses():
            print(status.table_path, status.status)
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from tierlake_client.jdbc import connect, parse_jdbc_url
from tierlake_client.sqltext import call_statement


class Transport(Protocol):
    def call(self, procedure: str, **arguments: Any) -> list[tuple]: ...


class JdbcClient:
    """One PyHive connection per thread (HiveServer2 connections are not thread-safe)."""

    def __init__(self, url: str, user: str = "tiering-service", password: str | None = None,
                 ca_file: str | None = None):
        parse_jdbc_url(url)  # a bad URL fails here, not in the first heartbeat
        self.url, self.user, self.password, self.ca_file = url, user, password, ca_file
        self._local = threading.local()
        self._open: list[Any] = []
        self._open_lock = threading.Lock()

    def connect(self) -> Any:
        """This thread's connection, logging in if it has none yet."""
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
                cursor.execute(call_statement(procedure, arguments))
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
