"""The peer watch: a synchronous statement whose client goes away is cancelled (transport/liveness.py)."""

from __future__ import annotations

import socket
import time

from tierlake.server.gateway.transport.liveness import PeerWatch, peer_gone
from tierlake.server.runtime.operations import OperationControl


def pair():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_a_statement_whose_client_goes_away_is_cancelled_and_others_are_not():
    watch = PeerWatch(poll_s=0.02)
    (gone_client, gone), (kept_client, kept) = pair(), pair()
    try:
        cancelled, running = OperationControl("gone"), OperationControl("kept")
        watch.watch(gone, cancelled)
        token = watch.watch(kept, running)
        time.sleep(0.1)
        assert not cancelled.cancelled and not peer_gone(gone)
        gone_client.close()
        assert wait_for(lambda: cancelled.cancelled)
        assert not running.cancelled and not peer_gone(kept)
        watch.unwatch(token)
        kept_client.close()
        time.sleep(0.1)
        assert not running.cancelled  # no longer watched: its statement ended
    finally:
        watch.stop()
        for s in (gone, kept, kept_client):
            s.close()
