"""The gateway's statement handler: ``CALL sys.*`` runs Python procedures."""

from __future__ import annotations

import logging
import time
from typing import Callable

from procedures.registry import Context, Registry
from server.exceptions import TierlakeError
from server.gateway.callparse import is_sys_call, parse_call
from server.gateway.protocol import LocalResult, SessionInfo

log = logging.getLogger("tierlake.calls")


class CallHandler:
    """Answers ``CALL sys.<name>(...)``; every other statement goes to Spark."""

    def __init__(self, registry: Registry, context_factory: Callable[[str | None], Context]):
        self.registry = registry
        self.context_factory = context_factory

    def wants(self, statement: str) -> bool:
        return is_sys_call(statement)

    def execute(self, statement: str, session: SessionInfo) -> LocalResult:
        return self.call(statement, user=session.user)

    def call(self, statement: str, user: str | None = None) -> LocalResult:
        """Parse and run one CALL; also used in-process (Admin API, tests)."""
        started = time.monotonic()
        try:
            parsed = parse_call(statement)
            proc = self.registry.get(parsed.name)
            rows = proc.invoke(self.context_factory(user), parsed.args, parsed.kwargs)
        except TierlakeError as e:
            log.info("CALL failed (%s) in %.3fs: %s", type(e).__name__, time.monotonic() - started, e.message)
            raise
        log.info("CALL sys.%s by %s: %d row(s) in %.3fs", proc.name, user, len(rows), time.monotonic() - started)
        return LocalResult(columns=list(proc.returns), rows=rows)
