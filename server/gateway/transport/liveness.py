"""Clients that go away while a synchronous statement runs.

A synchronous statement the gateway answers itself (PyHive's default) runs on
its connection's thread, which therefore reads nothing from the client until
it ends: a client that dropped the connection would not be noticed. One
thread per gateway watches the sockets of such statements and cancels a
statement whose client is gone (its ``OperationControl``), so an INSERT still
waiting for its table's commit lock is dropped rather than committed for
nobody (server/ingest/writer.py). Asynchronous statements need no watch: their
connection's thread reads on and cancels them when the client goes.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from typing import Any

log = logging.getLogger("tierlake.gateway")

# Linux TCP states (include/net/tcp_states.h) in which the peer has closed or reset the connection.
_PEER_GONE = frozenset({7, 8, 9, 11})  # CLOSE, CLOSE_WAIT, LAST_ACK, CLOSING
POLL_S = 0.1


def peer_gone(sock: socket.socket) -> bool:
    """Whether the other end of ``sock`` closed or reset it (without reading from it)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        return struct.unpack("B", info[:1])[0] in _PEER_GONE
    except (OSError, AttributeError, ValueError):
        pass
    try:  # not Linux: a plain socket that reads end-of-file without waiting
        sock.setblocking(False)
        try:
            return socket.socket.recv(sock, 1, socket.MSG_PEEK) == b""
        finally:
            sock.setblocking(True)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class PeerWatch:
    """Cancels watched statements whose client went away (checked every :data:`POLL_S`)."""

    def __init__(self, poll_s: float = POLL_S):
        self.poll_s = poll_s
        self._watched: dict[int, tuple[Any, Any]] = {}
        self._next = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, sock: Any, control: Any) -> int:
        """Watch ``sock`` until :meth:`unwatch`; ``control.cancel()`` when its client is gone."""
        with self._cond:
            self._next += 1
            idle = not self._watched
            self._watched[self._next] = (sock, control)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, daemon=True, name="tierlake-peer-watch")
                self._thread.start()
            if idle:  # the thread waits for a first statement; otherwise it looks again within poll_s
                self._cond.notify()
            return self._next

    def unwatch(self, token: int) -> None:
        with self._cond:
            self._watched.pop(token, None)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._watched and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                watched = list(self._watched.items())
            for token, (sock, control) in watched:
                try:
                    gone = peer_gone(sock)
                except Exception:  # noqa: BLE001 - a closed socket: its statement ends on its own
                    gone = False
                if gone:
                    self.unwatch(token)
                    log.info("client went away: cancelling %s", getattr(control, "description", "a statement"))
                    control.cancel()
            with self._cond:
                if self._stopped:
                    return
                self._cond.wait(self.poll_s)
