"""OperationControl: cancellation callbacks of gateway-answered statements."""

from __future__ import annotations

import threading

from tierlake.server.runtime.operations import OperationControl, current, running


def test_callbacks_run_once_on_cancel_and_at_once_when_registered_late():
    control, calls = OperationControl("t"), []
    unregister = control.on_cancel(lambda: calls.append("a"))
    control.on_cancel(lambda: calls.append("b"))
    unregister()
    control.cancel()
    control.cancel()
    assert control.cancelled and calls == ["b"]
    control.on_cancel(lambda: calls.append("late"))
    assert calls == ["b", "late"]


def test_a_failing_callback_does_not_stop_the_others():
    control, calls = OperationControl(), []
    control.on_cancel(lambda: 1 / 0)
    control.on_cancel(lambda: calls.append("ran"))
    control.cancel()
    assert calls == ["ran"]


def test_current_is_per_thread():
    control, seen = OperationControl(), []
    with running(control):
        assert current() is control
        thread = threading.Thread(target=lambda: seen.append(current()))
        thread.start()
        thread.join()
    assert seen == [None] and current() is None
