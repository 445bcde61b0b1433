"""The gateway's INSERTs into stream tables (server/ingest/writer.py).

A statement that Spark analyses, in the client's own session, as an append
into a stream table is answered here instead of being relayed: written and
committed by the table's committer and acknowledged once its commit landed.
Every other statement goes to the next handler (``inner``).

Authorisation has already happened on Spark's parse (the writer role on the
target table); the analysis here decides only *how* the write is made.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo
from tierlake.server.observability import metrics

log = logging.getLogger("tierlake.ingest")

MAX_STAGED = 1024  # statements analysed but not yet run (a client that never runs them costs no more)


class IngestHandler:
    """A statement handler in front of ``inner`` that runs INSERTs into stream tables."""

    def __init__(self, inner: Any, sessions: Callable[[], Any], writer: Any):
        self.inner = inner
        self._sessions = sessions  # the authoriser's SparkSessions (each Thrift session's SparkSession)
        self.writer = writer
        self._staged: OrderedDict[tuple[bytes, str], Any] = OrderedDict()
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
        closed = getattr(self.inner, "session_closed", None)
        if closed is not None:
            closed(guid)

    def wants_for(self, statement: str, session: SessionInfo) -> bool:
        staged = self._stage(statement, session)
        if staged is not None:
            with self._lock:
                self._staged[(session.session_guid, statement)] = staged
                while len(self._staged) > MAX_STAGED:
                    self._staged.popitem(last=False)
            return True
        wants_for = getattr(self.inner, "wants_for", None)
        return wants_for(statement, session) if wants_for else self.inner.wants(statement)

    def execute(self, statement: str, session: SessionInfo) -> LocalResult:
        with self._lock:
            staged = self._staged.pop((session.session_guid, statement), None)
        if staged is None:
            return self.inner.execute(statement, session)
        self.writer.write(staged)
        metrics.ingest_acknowledged(".".join(staged.table.split(".")[-2:]))  # the commit landed
        return LocalResult(columns=[("Result", "string")], rows=[])

    # -- deciding ---------------------------------------------------------------
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
