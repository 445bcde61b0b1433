"""A tiering worker: heartbeat → plan → write → lake commit → report.

Workers are stateless except their job id, which persists across restarts
of the same job (it is also the job's lease id).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tierlake.server.changelog import fresh_view, lake_write
from tierlake.server.changelog.handle import Assignment, TableHandle
from tierlake.server.changelog.planner import Registered
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.config.config import Config
from tierlake.server.coordinator.registration import registered_record
from tierlake.server.exceptions import FencedEpochError, TierlakeError
from tierlake.server.maintenance import tables as table_maintenance
from tierlake.server.observability import metrics
from tierlake.server.runtime import faults
from tierlake.server.runtime.session import TIERING_POOL, activate, private_session
from tierlake.server.tiering import snapshot_split
from tierlake.server.tiering.round import run_round

log = logging.getLogger("tierlake.tiering")


def persistent_job_id(home: Path, name: str) -> str:
    """The job id stored under ``$TIERLAKE_HOME/jobs/<name>``, created once."""
    path = home / "jobs" / name
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    job_id = f"{name}-{uuid.uuid4()}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(job_id)
    tmp.replace(path)
    return job_id


class _Renewer(threading.Thread):
    """Renews the table's heartbeat while a round runs; notices fencing."""

    def __init__(self, worker: Worker, table_id: int, epoch: int):
        super().__init__(name=f"renew-{table_id}", daemon=True)
        self.worker, self.table_id, self.epoch = worker, table_id, epoch
        self.fenced: str | None = None
        self.done = threading.Event()

    def renew(self) -> None:
        rows = self.worker.client.call("heartbeat", job_id=self.worker.job_id,
                                       tiering_tables=[{"table_id": self.table_id, "tiering_epoch": self.epoch}])
        error = next((r[4] for r in rows if r[0] == "tiering" and r[1] == self.table_id), None)
        if error:
            self.fenced = error

    def run(self) -> None:
        while not self.done.wait(self.worker.renew_interval):
            try:
                self.renew()
            except Exception:
                log.warning("heartbeat renewal failed", exc_info=True)


class Worker(threading.Thread):
    """One tiering job: asks the coordinator for tables while it holds fewer
    than ``tierlake.tiering.tables-per-job`` and tiers each in its own thread
    (Spark runs their statements side by side in the FAIR pool ``tiering``).
    Every table keeps its own epoch, renewal and fencing."""

    def __init__(self, spark: Any, client: Any, job_id: str, config: Any = None):
        super().__init__(name=f"tiering-{job_id[:24]}", daemon=True)
        self.spark, self.client, self.job_id, self.config = spark, client, job_id, config
        settings = config if config is not None else Config.defaults()
        self.renew_interval = max(0.5, settings.seconds("tierlake.tiering.heartbeat-timeout") / 4)
        self.poll_interval = settings.seconds("tierlake.tiering.poll-interval")
        self.tables_per_job = settings.int("tierlake.tiering.tables-per-job")
        self.stop_event = threading.Event()
        self.rounds = 0
        self.most_at_once = 0  # the most rounds this job ran at the same time
        self._running = 0
        self._count_lock = threading.Lock()
        self.hook = None  # tests: called with the name of each round step
        self.leases = snapshot_split.JobLeases(client, job_id)
        self._sessions = threading.local()  # each round thread's own Spark session (session.private_session)

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        log.info("tiering worker %s started (up to %d tables at once)", self.job_id, self.tables_per_job)
        self.leases.drop_stale()
        slots = threading.BoundedSemaphore(self.tables_per_job)
        started = True  # the first heartbeat releases what an earlier run of this job left assigned
        with ThreadPoolExecutor(self.tables_per_job, thread_name_prefix=f"round-{self.job_id[:16]}") as pool:
            while not self.stop_event.is_set():
                if not slots.acquire(timeout=self.poll_interval):
                    continue  # every slot busy
                try:
                    if started:
                        rows = self.client.call("heartbeat", job_id=self.job_id, request_table=True,
                                                job_started=True)
                        started = False
                    else:
                        rows = self.client.call("heartbeat", job_id=self.job_id, request_table=True)
                except Exception:
                    slots.release()
                    log.warning("heartbeat failed", exc_info=True)
                    self.stop_event.wait(self.poll_interval)
                    continue
                assigned = [r for r in rows if r[0] == "assigned"]
                if not assigned:
                    slots.release()
                    self.stop_event.wait(self.poll_interval)
                    continue
                for n, (_kind, table_id, path, epoch, _) in enumerate(assigned):
                    if n:
                        slots.acquire()  # a coordinator that assigns several tables per heartbeat
                    pool.submit(self._round_in_slot, slots, table_id, path, epoch)
            # Leaving the with block waits for the rounds in progress.

    def _round_in_slot(self, slots: threading.BoundedSemaphore, table_id: int, path: str, epoch: int) -> None:
        with self._count_lock:
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        try:
            self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", TIERING_POOL)
            self.tier(table_id, path, epoch, self.round_session())
        except Exception:  # tier() reports its own failures: this is a last resort
            log.exception("round of %s ended abnormally", path)
        finally:
            with self._count_lock:
                self._running -= 1
            slots.release()

    def round_session(self) -> Any:
        """This round thread's Spark session, made on its first round: rounds running side by side
        never share settings or temp views, nor with client sessions."""
        session = getattr(self._sessions, "spark", None)
        if session is None:
            session = self._sessions.spark = private_session(self.spark)
            # Cloned from a session another thread may be planning a bucketed MERGE in right now.
            lake_write.restore(session, {k: None for k in lake_write.BUCKETED_MERGE_CONF})
        else:
            activate(session)
        return session

    def tier(self, table_id: int, path: str, epoch: int, spark: Any = None) -> None:
        """One round for one table; always ends in finished, failed or fenced.

        ``spark``: the session the round runs in (the round thread's own; the server's if None)."""
        spark = spark if spark is not None else self.spark
        started = time.monotonic()
        renewer = _Renewer(self, table_id, epoch)
        renewer.start()
        entry = {"table_id": table_id, "tiering_epoch": epoch}

        def check_epoch() -> None:
            renewer.renew()
            if renewer.fenced:
                raise FencedEpochError(renewer.fenced)

        try:
            # The table's one handle for the round: loaded here, passed down (server/changelog/handle.py).
            handle = TableHandle.open(spark, self.config, path, Assignment(table_id, epoch, self.job_id))
            record = registered_record(spark, table_id)  # cross-checked with the lake and the stream
            registered = None if record is None else Registered(*record)
            plan = snapshot_split.plan_and_lease(handle, self.leases, registered)
            result = run_round(plan, check_epoch, hook=self.hook, defer_repin=True)
            try:
                # Still inside the assignment: no round of this table can race it.
                table_maintenance.after_round(handle, self.client, result.end_position)
                renewer.done.set()
                self.client.call("heartbeat", job_id=self.job_id, finished_tables=[dict(
                    entry, force_finished=result.force_finished, rows=result.rows, bytes=result.bytes,
                    files=result.files, tiered_position=result.end_position)])
            finally:
                if result.commits or result.schema_changed:
                    # After the report, not before it: the re-pin's view commit and metastore update,
                    # run at once, held up the coordinator's state commit (a primary-key round's
                    # finishing heartbeat took 151 ms p50 with it, 89 ms without). The handle goes
                    # to the re-pin thread with it: the round is done with it.
                    fresh_view.after_lake_commit(handle)
            self.leases.release(path)
            with self._count_lock:
                self.rounds += 1
            seconds = time.monotonic() - started
            metrics.round_tiered(path, result.rows, result.bytes, seconds)
            # The one line per round (issue 39): table, rows, bytes, duration, position.
            log.info("tiered %s: %d rows, %d bytes in %.2f s, positions %d..%d, %d commit(s)%s", path, result.rows,
                     result.bytes, seconds, plan.lake_position, result.end_position, result.commits,
                     " (force-finished)" if result.force_finished else "")
        except FencedEpochError as e:
            renewer.done.set()
            self.leases.release(path)
            try:
                renewer.renew()
            except Exception:  # noqa: BLE001
                renewer.fenced = renewer.fenced or "coordinator unreachable"
            if renewer.fenced:
                metrics.round_fenced(path)
                log.warning("round of %s (epoch %d) fenced: %s", path, epoch, e.message)
            else:
                # Still our table: something else (a compaction, a user DELETE)
                # committed to the lake table. Fail the round so it is retried.
                self._report_failure(entry, path, f"{e.message} (the lake table was changed by another writer)")
        except Exception as e:  # noqa: BLE001 - every other failure is reported with its text
            renewer.done.set()
            self.leases.release(path)
            message = e.message if isinstance(e, TierlakeError) else f"{type(e).__name__}: {e}"
            log.warning("round of %s failed: %s\n%s", path, message, traceback.format_exc())
            self._report_failure(entry, path, message)
        finally:
            renewer.done.set()
            faults.point("after-report")

    def _report_failure(self, entry: dict, path: str, message: str) -> None:
        metrics.round_failed(path)
        try:
            self.client.call("heartbeat", job_id=self.job_id, failed_tables=[dict(entry, error_message=message)])
        except Exception:
            log.exception("could not report the failure of %s", path)


def start_workers(server: Any, count: int) -> list[Worker]:
    client = LocalClient(server)
    workers = []
    for n in range(count):
        job_id = persistent_job_id(server.config.home, f"worker-{n}")
        worker = Worker(server.spark, client, job_id, server.config)
        worker.start()
        workers.append(worker)
    return workers
