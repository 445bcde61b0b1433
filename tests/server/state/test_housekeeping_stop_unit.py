"""A stop does not wait for a whole sys housekeeping pass (no JVM: the Iceberg actions are stubs)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from tierlake.server.config.config import Config
from tierlake.server.state import housekeeping

ACTION_S = 0.2


class _Spark:
    """tableExists says yes; a history read counts nothing (no rows past their retention)."""

    def __init__(self) -> None:
        self.catalog = SimpleNamespace(tableExists=lambda name: True)

    def table(self, name):
        return SimpleNamespace(where=lambda _: SimpleNamespace(count=lambda: 0))


def test_a_stop_mid_pass_waits_for_one_table_not_the_pass(tmp_path, monkeypatch):
    started = threading.Event()

    def slow(*_args, **_kwargs):
        started.set()
        time.sleep(ACTION_S)
        return 0

    monkeypatch.setattr(housekeeping, "iceberg_table", lambda spark, name: name)
    for action in ("bound_metadata", "expire_snapshots", "remove_orphans"):
        monkeypatch.setattr(housekeeping.im, action, slow)
    monkeypatch.setattr(housekeeping.im, "data_file_counts", lambda table: (1, 0))
    keeper = housekeeping.Housekeeper(_Spark(), Config.load(home=tmp_path / "home", conf={}))
    tables = len(keeper.tables)
    assert tables >= 10  # a whole pass is seconds of actions: what a stop used to wait for
    keeper.start()
    assert started.wait(10)
    time.sleep(ACTION_S * 2)  # well into the first pass
    asked = time.monotonic()
    keeper.stop()
    waited = time.monotonic() - asked
    assert not keeper.is_alive()
    assert waited < ACTION_S * 3, f"the stop waited {waited:.1f} s ({tables} tables of {ACTION_S} s each)"
