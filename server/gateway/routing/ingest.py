"""The gateway's INSERTs into stream tables (server/ingest/writer.py) and its
``tierlake.*`` session settings (server/ingest/request_ids.py).

A statement that Spark analyses, in the client's own session, as an append
into a stream table is answered here instead of being relayed: written and
committed by the table's committer and acknowledged once its commit landed.
Every other statement goes to the next handler (``inner``).

``SET`` of a ``tierlake.*`` key is answered here too, never by Spark: the
key must be a session setting (else :class:`UnknownSettingError` with a
did-you-mean) and a request id is checked when it is set. The gateway keeps a
session's request id itself; it applies to the session's next statement other
than a SET or RESET and is gone after it, whatever that statement is (an
INSERT into a plain table, a failed one, a SELECT) and however it ends. The
write records it under a keyed hash of the session's user and the id.

Authorisation has already happened on Spark's parse (the writer role on the
target table, and for SET of the request id); the analysis here decides only
*how* the write is made.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo
from tierlake.server.ingest import request_ids
from tierlake.server.observability import metrics

log = logging.getLogger("tierlake.ingest")

MAX_STAGED = 1024  # statements analysed but not yet run (a client that never runs them costs no more)
_SET_NODES = frozenset({"SetCommand", "ResetCommand"})
UNDEFINED = "<undefined>"  # what Spark's SET answers for a key that is not set


@dataclass(frozen=True)
class _Setting:
    """A SET or RESET of a tierlake.* key, answered in :meth:`IngestHandler.execute`."""

    reset: bool
    key: str
    value: str | None  # None: show it (SET key) or reset it


@dataclass(frozen=True)
class _Tagged:
    """A statement the next handler runs with the session's request key current (a CTAS)."""

    key: str | None


class IngestHandler:
    """A statement handler in front of ``inner`` that runs INSERTs into stream tables."""

    def __init__(self, inner: Any, sessions: Callable[[], Any], writer: Any,
                 keys: request_ids.RequestKeys | None = None):
        self.inner = inner
        self._sessions = sessions  # the authoriser's SparkSessions (each Thrift session's SparkSession)
        self.writer = writer
        self._keys = keys
        # What wants_for decided, for execute: by (session, statement), oldest first (the same text
        # twice in one session before the first runs: each gets its own).
        self._staged: OrderedDict[tuple[bytes, str], deque[Any]] = OrderedDict()
        self._request_ids: dict[bytes, str] = {}  # session → its request id, until its next statement
        self._lock = threading.Lock()

    # -- the handler interface ------------------------------------------------
    def wants(self, statement: str) -> bool:
        return self.inner.wants(statement)

    def runs_ddl(self, statement: str) -> bool:
        return self.inner.runs_ddl(statement)

    def session_closed(self, guid: bytes) -> None:
        with self._lock:
            for key in [k for k in self._staged if k[0] == guid]:
                del self._staged[key]
            self._request_ids.pop(guid, None)
        closed = getattr(self.inner, "session_closed", None)
        if closed is not None:
            closed(guid)

    def statement_refused(self, session: SessionInfo) -> None:
        """The gateway refused a statement of ``session`` before asking the handlers (its role, its
        size, Spark's parse): it was the session's next statement, so the request id is gone."""
        with self._lock:
            self._request_ids.pop(session.session_guid, None)

    def request_id(self, guid: bytes) -> str | None:
        """The request id session ``guid`` set for its next statement (tests, the status page)."""
        with self._lock:
            return self._request_ids.get(guid)

    def wants_for(self, statement: str, session: SessionInfo) -> bool:
        setting = self._setting(statement, session)
        if setting is not None:
            if setting.key is None:  # RESET of everything: the request id too; the rest is Spark's
                if setting.reset:
                    with self._lock:
                        self._request_ids.pop(session.session_guid, None)
                return self._inner_wants(statement, session)
            if not request_ids.is_tierlake_key(setting.key):
                return self._inner_wants(statement, session)
            self._keep(session, statement, _Setting(setting.reset, setting.key, setting.value))
            return True
        with self._lock:  # the next statement takes the id, whatever it is
            request_id = self._request_ids.pop(session.session_guid, None)
        staged = self._stage(statement, session)
        if staged is not None:
            if request_id is not None:
                staged.request_id, staged.request_key = request_id, self._key(session, request_id)
            self._keep(session, statement, staged)
            return True
        wanted = self._inner_wants(statement, session)
        if wanted and request_id is not None:
            self._keep(session, statement, _Tagged(self._key(session, request_id)))
        return wanted

    def execute(self, statement: str, session: SessionInfo) -> LocalResult:
        with self._lock:
            waiting = self._staged.get((session.session_guid, statement))
            prepared = waiting.popleft() if waiting else None
            if waiting is not None and not waiting:
                del self._staged[(session.session_guid, statement)]
        if isinstance(prepared, _Setting):
            return self._set(prepared, session)
        if isinstance(prepared, _Tagged):
            with request_ids.tagged(prepared.key):
                return self.inner.execute(statement, session)
        if prepared is None:
            # Nothing kept for it (forgotten at MAX_STAGED): an INSERT into a stream table is
            # analysed again here, never run by anything but its committer.
            prepared = self._stage(statement, session)
            if prepared is None:
                return self.inner.execute(statement, session)
        self.writer.write(prepared)
        metrics.ingest_acknowledged(".".join(prepared.table.split(".")[-2:]))  # the commit landed
        return LocalResult(columns=[("Result", "string")], rows=[])

    # -- session settings ---------------------------------------------------------
    def _set(self, setting: _Setting, session: SessionInfo) -> LocalResult:
        key = request_ids.check_session_key(setting.key)
        guid = session.session_guid
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

    def _key(self, session: SessionInfo, request_id: str) -> str:
        if self._keys is None:
            raise RuntimeError("the gateway was started without request-id keys")  # app.py gives them
        return self._keys.key(session.user, request_id)

    # -- deciding ---------------------------------------------------------------
    def _inner_wants(self, statement: str, session: SessionInfo) -> bool:
        wants_for = getattr(self.inner, "wants_for", None)
        return wants_for(statement, session) if wants_for else self.inner.wants(statement)

    def _keep(self, session: SessionInfo, statement: str, prepared: Any) -> None:
        with self._lock:
            self._staged.setdefault((session.session_guid, statement), deque()).append(prepared)
            self._staged.move_to_end((session.session_guid, statement))
            while len(self._staged) > MAX_STAGED:
                self._staged.popitem(last=False)

    def _setting(self, statement: str, session: SessionInfo) -> _Setting | None:
        """The statement as a SET/RESET (key None: of everything), or None for any other statement.
        Spark's parse decides: the authoriser's, or (without a password file) one made here for a
        statement whose text may be one."""
        plan = planauth.recall(statement)
        if plan is None:
            lowered = statement.lower()
            if "set" not in lowered:
                return None
            if "tierlake" not in lowered and not lowered.lstrip().startswith("reset"):
                # No tierlake key in it; it only matters whether it is a SET when an id is waiting.
                with self._lock:
                    waiting = session.session_guid in self._request_ids
                if not waiting:
                    return None
            plan = self._parse(statement, session)
            if plan is None:
                return None
        if plan.root.name not in _SET_NODES:
            return None
        key, value = planauth.setting_of(plan.root)
        if key is not None and key.startswith("-"):  # SET -v
            key = None
        return _Setting(plan.root.name == "ResetCommand", key, value)

    def _parse(self, statement: str, session: SessionInfo) -> Any:
        sessions = self._sessions()
        if sessions is None:
            return None
        try:
            jsession = sessions.session(session.session_guid, session.secret)
            return planauth.parse_plan(jsession, statement)
        except Exception:
            log.debug("not parsed: %r", statement[:200], exc_info=True)
            return None

    def _stage(self, statement: str, session: SessionInfo) -> Any:
        authorised = planauth.recall(statement)
        if authorised is not None:
            if authorised.root.name != "InsertIntoStatement":
                return None
        elif "insert" not in statement.lower():
            return None
        parsed = authorised.java if authorised is not None else None
        sessions = self._sessions()
        if sessions is None:
            return None
        try:
            jsession = sessions.session(session.session_guid, session.secret)
            staged = self.writer.stage(jsession, statement, parsed)
        except Exception:
            log.debug("INSERT not staged, relayed: %r", statement[:200], exc_info=True)
            return None
        return staged
