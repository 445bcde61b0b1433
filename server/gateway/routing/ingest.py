"""Two of the gateway's routes (router.py): INSERTs into stream tables
(:class:`IngestHandler`, server/ingest/writer.py) and the ``tierlake.*``
session settings (:class:`SessionSettings`, server/ingest/request_ids.py).

A statement that Spark analyses, in the client's own session, as an append
into a stream table is answered by the ingest route instead of being
relayed: written and committed by the table's committer and acknowledged
once its commit landed.

``SET`` of a ``tierlake.*`` key is answered by the settings route, never by
Spark: the key must be a session setting (else :class:`UnknownSettingError`
with a did-you-mean) and a request id is checked when it is set. The gateway
keeps a session's request id itself; it applies to the session's next
statement other than a SET or RESET and is gone after it, whatever that
statement is (an INSERT into a plain table, a failed one, a SELECT) and
however it ends: the settings route hands it to that statement
(``statement.request_id``) while the statement is routed. The write records
it under a keyed hash of the session's user and the id.

Authorisation has already happened on Spark's parse (the writer role on the
target table, and for SET of the request id); the analysis here decides only
*how* the write is made.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo, Statement
from tierlake.server.ingest import request_ids
from tierlake.server.observability import metrics

log = logging.getLogger("tierlake.ingest")

_SET_NODES = frozenset({"SetCommand", "ResetCommand"})
UNDEFINED = "<undefined>"  # what Spark's SET answers for a key that is not set


@dataclass(frozen=True)
class _Setting:
    """A SET or RESET of a tierlake.* key, answered by :meth:`SessionSettings.execute`."""

    reset: bool
    key: str | None
    value: str | None  # None: show it (SET key) or reset it


class SessionSettings:
    """Route ``setting``: SET/RESET of ``tierlake.*`` session settings; the keeper of each session's
    request id (asked first: every other statement takes the id as it is routed)."""

    name = "setting"
    role = None
    what = "SET of a tierlake setting"

    def __init__(self, keys: request_ids.RequestKeys | None = None):
        self._keys = keys
        self._request_ids: dict[bytes, str] = {}  # session → its request id, until its next statement
        self._lock = threading.Lock()

    def claim(self, statement: Statement) -> bool:
        session = statement.session
        setting = self._setting(statement)
        if setting is not None:
            if setting.key is None:  # RESET of everything: the request id too; the rest is Spark's
                if setting.reset:
                    with self._lock:
                        self._request_ids.pop(session.session_guid, None)
                return False
            if not request_ids.is_tierlake_key(setting.key):
                return False
            statement.prepared = setting
            return True
        with self._lock:  # the next statement takes the id, whatever it is
            request_id = self._request_ids.pop(session.session_guid, None)
        if request_id is not None:
            statement.request_id, statement.request_key = request_id, self._key(session, request_id)
        return False

    def execute(self, statement: Statement) -> LocalResult:
        setting: _Setting = statement.prepared
        key = request_ids.check_session_key(setting.key)
        guid = statement.session.session_guid
        if setting.reset:
            with self._lock:
                self._request_ids.pop(guid, None)
            return LocalResult(columns=[("Result", "string")], rows=[])
        if setting.value is None:  # SET key: show it
            with self._lock:
                value = self._request_ids.get(guid)
            return LocalResult(columns=[("key", "string"), ("value", "string")],
                               rows=[(key, UNDEFINED if value is None else value)])
        request_ids.check_request_id(setting.value)
        with self._lock:
            if setting.value:
                self._request_ids[guid] = setting.value
            else:  # SET key= (empty): no id
                self._request_ids.pop(guid, None)
        return LocalResult(columns=[("key", "string"), ("value", "string")], rows=[(key, setting.value)])

    def session_closed(self, guid: bytes) -> None:
        with self._lock:
            self._request_ids.pop(guid, None)

    def refused(self, statement: Statement) -> None:
        """The gateway refused ``statement`` before routing it (its role, its size, Spark's parse): it
        was the session's next statement, so the request id is gone."""
        with self._lock:
            self._request_ids.pop(statement.session.session_guid, None)

    def request_id(self, guid: bytes) -> str | None:
        """The request id session ``guid`` set for its next statement (tests, the status page)."""
        with self._lock:
            return self._request_ids.get(guid)

    def _key(self, session: SessionInfo, request_id: str) -> str:
        if self._keys is None:
            raise RuntimeError("the gateway was started without request-id keys")  # app.py gives them
        return self._keys.key(session.user, request_id)

    def _setting(self, statement: Statement) -> _Setting | None:
        """The statement as a SET/RESET (key None: of everything), or None for any other statement.
        Spark's parse decides: the authoriser's, or (without a password file) the statement's one
        parse, made for a statement whose text may be one."""
        lowered = statement.text.lower()
        worth_it = "set" in lowered
        if worth_it and "tierlake" not in lowered and not lowered.lstrip().startswith("reset"):
            # No tierlake key in it; it only matters whether it is a SET when an id is waiting.
            with self._lock:
                worth_it = statement.session.session_guid in self._request_ids
        plan = statement.parsed(worth_it)
        if plan is None or plan.root is None or plan.root.name not in _SET_NODES:
            return None
        key, value = planauth.setting_of(plan.root)
        if key is not None and key.startswith("-"):  # SET -v
            key = None
        return _Setting(plan.root.name == "ResetCommand", key, value)


class IngestHandler:
    """Route ``ingest``: INSERTs into stream tables, written and committed by the table's committer."""

    name = "ingest"
    role = None
    what = "an INSERT into a stream table"

    def __init__(self, sessions: Callable[[], Any], writer: Any):
        self._sessions = sessions  # the authoriser's SparkSessions (each Thrift session's SparkSession)
        self.writer = writer

    def claim(self, statement: Statement) -> bool:
        staged = self._stage(statement)
        if staged is None:
            return False
        if statement.request_id is not None:
            staged.request_id, staged.request_key = statement.request_id, statement.request_key
        statement.prepared = staged
        return True

    def execute(self, statement: Statement) -> LocalResult:
        staged = statement.prepared
        self.writer.write(staged)
        metrics.ingest_acknowledged(".".join(staged.table.split(".")[-2:]))  # the commit landed
        return LocalResult(columns=[("Result", "string")], rows=[])

    def session_closed(self, guid: bytes) -> None:
        pass

    def _stage(self, statement: Statement) -> Any:
        if "insert" not in statement.text.lower():
            return None
        sessions = self._sessions()
        if sessions is None:
            return None
        session = statement.session
        try:
            jsession = sessions.session(session.session_guid, session.secret)
            # A template analysed before: no parse, no analysis (ingest/java/ValuesTemplates.java).
            try:
                staged = self.writer.stage_cached(jsession, statement.text)
            except Exception:  # Spark's path below decides and reports
                log.debug("INSERT template not used: %r", statement.text[:200], exc_info=True)
                staged = None
            if staged is not None:
                return staged
            plan = statement.parsed()
            if plan is None or plan.root is None or plan.root.name != "InsertIntoStatement":
                return None
            return self.writer.stage(jsession, statement.text, plan.java)
        except Exception:
            log.debug("INSERT not staged, relayed: %r", statement.text[:200], exc_info=True)
            return None
