"""Python Admin API, after Fluss's ``Admin.listTieringStatuses()``.

In-process (``Admin.local(server)``) it calls the procedures directly; over a
JDBC URL (``Admin.connect("jdbc:hive2://host:port/default")``) it sends the
same ``CALL sys.*`` statements through the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tierlake import sql

T_CALL = "templates/call.sql.j2"


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
    """Administrative calls against one tierlake server."""

    def __init__(self, run):
        self._run = run
        self._closers: list = []

    @classmethod
    def local(cls, server: Any, user: str | None = None) -> "Admin":
        def run(name: str, kwargs: dict[str, Any]) -> list[tuple]:
            proc = server.registry.get(name)
            return proc.invoke(server.context(user), [], kwargs)

        return cls(run)

    @classmethod
    def connect(cls, url: str, user: str | None = None, password: str | None = None,
                ca_file: str | None = None) -> "Admin":
        from tierlake.server.clients.jdbc import connect

        conn = connect(url, user or "admin", password, ca_file)

        def run(name: str, kwargs: dict[str, Any]) -> list[tuple]:
            cursor = conn.cursor()
            try:
                cursor.execute(sql.render(T_CALL, procedure=name, arguments=kwargs))
                return [tuple(r) for r in cursor.fetchall()]
            finally:
                cursor.close()

        admin = cls(run)
        admin._closers.append(conn.close)
        return admin

    def list_tiering_statuses(self, table_path: str | None = None) -> list[TableTieringStatus]:
        """Every registered table's tiering status, or one table's."""
        return [_status(r) for r in self._run("list_tiering_statuses", {"table": table_path})]

    def close(self) -> None:
        for close in self._closers:
            close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
