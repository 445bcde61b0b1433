"""The tiering round's data-quality hook (``table.datalake.quality``).

- ``off``: nothing.
- ``block`` (write-audit-publish): each chunk is written to the round's
  branch as always; before ``main`` is fast-forwarded to it the branch's state
  is validated, and a failure raises :class:`QualityCheckError` instead of
  publishing. The round ends like any failed round (the branch is dropped,
  the table goes ``Failed`` with the failing expectations as its error), so
  ``main`` never shows the data.
- ``warn``: after the round has published, ``main`` is validated and the
  results recorded; a failure is logged, never raised, and neither is an
  error of the validation itself (it must not fail a round that committed).
"""

from __future__ import annotations

import logging
from typing import Any

from tierlake.server.exceptions import QualityCheckError
from tierlake.server.quality import suite

log = logging.getLogger("tierlake.quality")


class QualityGate:
    def __init__(self, plan: Any):
        handle = plan.handle  # the round's (server/changelog/handle.py): the gate reads its tables
        self.spark, self.plan = handle.spark, plan
        self.table_id, self.epoch = handle.assignment.table_id, handle.assignment.epoch
        # Table id 0 is an atomic CTAS filling its staged tables (server/ctas.py):
        # they have no expectations yet, and the statement is all-or-nothing anyway.
        self.mode = plan.spec.quality if self.table_id > 0 else "off"

    def _target(self, ref: str, position: int, stream_snapshot_id: int | None, trigger: str) -> suite.Target:
        return suite.Target(self.table_id, self.plan.handle, position, stream_snapshot_id, ref=ref, trigger=trigger,
                            epoch=self.epoch)

    def before_publish(self, branch: str, chunk: Any) -> None:
        """block: validate the branch holding the chunk; raise instead of publishing a failure."""
        if self.mode != "block":
            return
        result = suite.run(self.spark, self._target(branch, chunk.end_position, chunk.end_snapshot_id, "block"))
        if not result.success:
            raise QualityCheckError(
                f"data quality check failed on lake table {self.plan.lake} for stream positions "
                f"{chunk.start_position}..{chunk.end_position} (epoch {self.epoch}); nothing was published "
                f"(run {result.run_id} in sys.lake_data_quality): {suite.failure_text(result)}. Fix the data "
                f"(for primary-key tables, write correcting changes to {self.plan.stream}) or drop the expectation "
                f"(CALL sys.drop_expectation), then CALL sys.retry_tiering('{self.plan.stream}')"
            )

    def after_round(self, committed: int, position: int) -> None:
        """warn: validate ``main`` after a round that published something."""
        if self.mode != "warn" or not committed:
            return
        try:
            result = suite.run(self.spark, self._target("main", position, None, "warn"))
            if not result.success:
                log.warning("data quality check of %s failed (warn mode, run %s): %s", self.plan.lake,
                            result.run_id, suite.failure_text(result))
        except Exception:
            log.warning("data quality validation of %s failed to run", self.plan.lake, exc_info=True)
