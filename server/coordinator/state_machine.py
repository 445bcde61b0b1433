"""The tiering state machine (Fluss's LakeTableTieringManager, kept) as pure
functions over :class:`TableState` values: no Spark, no I/O, fully unit-testable.

::

    New ─┐                     ┌──────────────── (finished) ─────────────┐
         ├─► Scheduled ─► Pending ─► Tiering ─┬─► Tiered ─► Scheduled     │
 Initialized                 ▲                │     └─► Pending (force-finished: more data waits)
                             └──── Failed ◄───┘ (failure or heartbeat timeout)

Every entry into Pending increments the table's tiering epoch. Where Fluss
moves Failed → Pending at once, a failure reported by a job here waits a
back-off (doubling per consecutive failure) so the error stays visible and a
table that always fails cannot spin; ``sys.retry_tiering`` skips the wait.
Heartbeat timeouts re-queue at once, as in Fluss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from tierlake.server.catalog.properties import DEFAULT_FRESHNESS, FRESHNESS_PROPERTY
from tierlake.server.config.durations import format_duration, parse_duration
from tierlake.server.escaping import printable
from tierlake.server.exceptions import (
    FencedEpochError,
    IllegalTransitionError,
    NotAssignedError,
    TierlakeError,
    UnknownTableIdError,
)

MAX_ERROR_CHARS = 2048


class Status(str, Enum):
    NEW = "New"
    INITIALIZED = "Initialized"
    SCHEDULED = "Scheduled"
    PENDING = "Pending"
    TIERING = "Tiering"
    TIERED = "Tiered"
    FAILED = "Failed"


TRANSITIONS: dict[Status | None, frozenset[Status]] = {
    None: frozenset({Status.NEW, Status.INITIALIZED}),
    Status.NEW: frozenset({Status.SCHEDULED}),
    Status.INITIALIZED: frozenset({Status.SCHEDULED}),
    Status.SCHEDULED: frozenset({Status.PENDING}),
    Status.PENDING: frozenset({Status.TIERING}),
    Status.TIERING: frozenset({Status.TIERED, Status.FAILED}),
    Status.TIERED: frozenset({Status.SCHEDULED, Status.PENDING}),
    Status.FAILED: frozenset({Status.PENDING}),
}


@dataclass
class TableState:
    """One row of ``sys.tiering_tables``."""

    table_id: int
    database_name: str
    table_name: str
    lake_database: str
    lake_table: str
    status: Status | None = None
    tiering_epoch: int = 0
    job_id: str | None = None
    last_heartbeat: datetime | None = None
    last_tiered_time: datetime | None = None
    tiered_position: int | None = None
    last_error: str | None = None
    last_error_time: datetime | None = None
    failure_count: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    pending_since: datetime | None = None
    round_started: datetime | None = None
    next_due: datetime | None = None
    stream_uuid: str | None = None  # Iceberg table UUID at registration (a re-created stream differs)

    @property
    def path(self) -> str:
        return f"{self.database_name}.{self.table_name}"

    @property
    def freshness(self) -> timedelta:
        return parse_duration(self.properties.get(FRESHNESS_PROPERTY, DEFAULT_FRESHNESS), FRESHNESS_PROPERTY)

    def copy(self) -> TableState:
        return dataclasses.replace(self, properties=dict(self.properties))


@dataclass(frozen=True)
class Policy:
    heartbeat_timeout: timedelta = timedelta(minutes=2)
    retry_backoff: timedelta = timedelta(seconds=5)
    retry_backoff_max: timedelta = timedelta(minutes=5)

    def backoff(self, failures: int) -> timedelta:
        factor = 2 ** max(0, min(failures - 1, 20))
        return min(self.retry_backoff * factor, self.retry_backoff_max)


@dataclass(frozen=True)
class TieringEntry:
    table_id: int
    tiering_epoch: int


@dataclass(frozen=True)
class FinishedEntry:
    table_id: int
    tiering_epoch: int
    force_finished: bool = False
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    tiered_position: int | None = None


@dataclass(frozen=True)
class FailedEntry:
    table_id: int
    tiering_epoch: int
    error_message: str | None = None


@dataclass
class Answer:
    """One row of the heartbeat's result."""

    kind: str
    table_id: int
    table_path: str | None
    tiering_epoch: int | None
    error: str | None = None

    def row(self) -> tuple:
        return (self.kind, self.table_id, self.table_path, self.tiering_epoch, self.error)


@dataclass
class Round:
    """One row of ``sys.tiering_rounds``."""

    table_id: int
    database_name: str
    table_name: str
    tiering_epoch: int
    job_id: str | None
    started_at: datetime | None
    ended_at: datetime
    start_position: int | None
    end_position: int | None
    rows: int | None
    bytes: int | None
    files: int | None
    outcome: str
    error: str | None

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None:
            return None
        return int((self.ended_at - self.started_at).total_seconds() * 1000)


@dataclass
class Outcome:
    answers: list[Answer] = field(default_factory=list)
    changed: set[int] = field(default_factory=set)
    rounds: list[Round] = field(default_factory=list)


def truncate_error(message: str | None) -> str | None:
    """At most 2048 characters, on one line; a cut message ends with '…' so
    readers know. A round's error quotes what writers sent (a bad change
    type, a key), so it is escaped like a log line (server/escaping.py)
    before anyone reads it in ``sys.lake_tiering_status`` or on the status page."""
    if message is None:
        return None
    message = printable(message)
    if len(message) <= MAX_ERROR_CHARS:
        return message
    return message[: MAX_ERROR_CHARS - 1] + "…"


def transition(state: TableState, target: Status, now: datetime) -> None:
    """Move ``state`` to ``target`` or raise :class:`IllegalTransitionError`."""
    allowed = TRANSITIONS.get(state.status, frozenset())
    if target not in allowed:
        current = state.status.value if state.status else "(unregistered)"
        raise IllegalTransitionError(
            f"table {state.path} (id {state.table_id}): illegal tiering state change "
            f"{current} -> {target.value}"
        )
    state.status = target
    state.updated_at = now
    if target is Status.PENDING:
        state.tiering_epoch += 1
        state.pending_since = now
        state.next_due = None


def register(state: TableState, initial: Status, now: datetime) -> None:
    """A new registration: New (created by tierlake) or Initialized (enabled later), then Scheduled, due now."""
    transition(state, initial, now)
    state.created_at = state.created_at or now
    transition(state, Status.SCHEDULED, now)
    state.next_due = now


def _round(state: TableState, now: datetime, outcome: str, error: str | None = None,
           entry: FinishedEntry | None = None) -> Round:
    return Round(
        table_id=state.table_id, database_name=state.database_name, table_name=state.table_name,
        tiering_epoch=state.tiering_epoch, job_id=state.job_id, started_at=state.round_started,
        # Where the round started: the tiered position before it, 0 (the
        # stream's start) when the table has never been tiered.
        ended_at=now, start_position=state.tiered_position if state.tiered_position is not None else 0,
        end_position=(entry.tiered_position if entry and entry.tiered_position is not None else state.tiered_position),
        rows=entry.rows if entry else None, bytes=entry.bytes if entry else None,
        files=entry.files if entry else None, outcome=outcome, error=error,
    )


def _check_entry(states: dict[int, TableState], job_id: str, table_id: int, epoch: int) -> TableState:
    state = states.get(table_id)
    if state is None:
        raise UnknownTableIdError(f"table id {table_id} is not registered for tiering (dropped or disabled?)")
    if epoch != state.tiering_epoch:
        raise FencedEpochError(
            f"tiering epoch {epoch} of table {state.path} (id {table_id}) is stale: "
            f"the current epoch is {state.tiering_epoch}"
        )
    if state.status is not Status.TIERING:
        raise NotAssignedError(
            f"table {state.path} (id {table_id}) is not being tiered (status {state.status.value})"
        )
    if state.job_id != job_id:
        raise NotAssignedError(
            f"table {state.path} (id {table_id}) is being tiered by job {state.job_id}, not {job_id}"
        )
    return state


def fail(state: TableState, error: str | None, now: datetime, policy: Policy, out: Outcome,
         outcome: str = "failed", requeue_now: bool = False) -> None:
    """Tiering → Failed, keeping the error; Pending now or after the back-off."""
    transition(state, Status.FAILED, now)
    state.last_error = truncate_error(error)
    state.last_error_time = now
    state.failure_count += 1
    out.rounds.append(_round(state, now, outcome, state.last_error))
    state.job_id = None
    state.round_started = None
    if requeue_now:
        transition(state, Status.PENDING, now)
    else:
        state.next_due = now + policy.backoff(state.failure_count)
    out.changed.add(state.table_id)


def finish(state: TableState, entry: FinishedEntry, now: datetime, out: Outcome) -> None:
    """Tiering → Tiered → Scheduled (or Pending at once when force-finished)."""
    transition(state, Status.TIERED, now)
    nothing_new = not entry.rows and (entry.tiered_position or 0) == (state.tiered_position or 0)
    if not nothing_new:
        # Rounds that found nothing new change the state but are not history.
        out.rounds.append(_round(state, now, "force_finished" if entry.force_finished else "finished", entry=entry))
    state.last_tiered_time = now
    if entry.tiered_position is not None:
        state.tiered_position = entry.tiered_position
    state.last_error = None
    state.last_error_time = None
    state.failure_count = 0
    state.job_id = None
    state.round_started = None
    if entry.force_finished:
        transition(state, Status.PENDING, now)
    else:
        transition(state, Status.SCHEDULED, now)
        state.next_due = now + state.freshness
    out.changed.add(state.table_id)


def schedule(states: dict[int, TableState], now: datetime, policy: Policy,
             liveness: dict[int, datetime] | None = None, out: Outcome | None = None,
             quiet: Iterable[int] = ()) -> Outcome:
    """Time-driven changes: heartbeat timeouts, due tables and retries → Pending.

    ``liveness`` holds heartbeats the caller has not persisted yet (newer than
    ``last_heartbeat``). ``quiet``: ids of due ``Scheduled`` tables whose stream
    has not changed since their last round (server/coordinator/idle.py): they
    stay ``Scheduled``, unchanged (a failed table's retry is never skipped).
    """
    quiet = frozenset(quiet)
    out = out or Outcome()
    for state in states.values():
        if state.status is Status.TIERING:
            seen = max(filter(None, [state.last_heartbeat, (liveness or {}).get(state.table_id), state.round_started]),
                       default=None)
            if seen is not None and now - seen >= policy.heartbeat_timeout:
                fail(state,
                     f"tiering job {state.job_id} sent no heartbeat for {format_duration(now - seen)} "
                     f"(tierlake.tiering.heartbeat-timeout is {format_duration(policy.heartbeat_timeout)}); "
                     "the table was re-queued",
                     now, policy, out, outcome="timed_out", requeue_now=True)
        elif state.status in (Status.SCHEDULED, Status.FAILED):
            if state.status is Status.SCHEDULED and state.table_id in quiet:
                continue
            if state.next_due is None or state.next_due <= now:
                transition(state, Status.PENDING, now)
                out.changed.add(state.table_id)
    return out


def retry(state: TableState, now: datetime) -> None:
    """``sys.retry_tiering``: a Failed table goes Pending now."""
    if state.status is not Status.FAILED:
        raise IllegalTransitionError(
            f"table {state.path} is {state.status.value}, not Failed: only a Failed table can be retried"
        )
    transition(state, Status.PENDING, now)


def disable(state: TableState, now: datetime) -> Round:
    """``sys.disable_tiering``: the table leaves the state machine (the caller
    drops its state); the returned ``disabled`` round closes whatever round was
    in progress, so its history shows why it ended."""
    return _round(state, now, "disabled")


def assign(state: TableState, job_id: str, now: datetime) -> None:
    """A Pending table goes to ``job_id``: Tiering, its round starts now."""
    transition(state, Status.TIERING, now)
    state.job_id = job_id
    state.last_heartbeat = now
    state.round_started = now


def heartbeat(
    states: dict[int, TableState],
    job_id: str,
    tiering: Iterable[TieringEntry],
    finished: Iterable[FinishedEntry],
    failed: Iterable[FailedEntry],
    request_table: bool,
    now: datetime,
    policy: Policy,
    liveness: dict[int, datetime] | None = None,
    job_started: bool = False,
    quiet: Iterable[int] = (),
) -> Outcome:
    """Handle one heartbeat: failed, in-progress, finished, then assignment.

    Each entry is answered on its own; a bad entry never fails the others.
    ``liveness`` receives the renewal time of in-progress tables.
    ``job_started``: the job's first heartbeat since it (re)started; a table
    still assigned to it that it does not report was abandoned by its earlier
    run (a crash, an unclean stop) and is re-queued at once, its epoch fenced,
    instead of waiting out the heartbeat timeout.
    ``quiet``: due tables that stay ``Scheduled`` (see :func:`schedule`).
    """
    out = Outcome()
    liveness = liveness if liveness is not None else {}
    if job_started:
        reported = {e.table_id for group in (failed, tiering, finished) for e in group}
        for state in states.values():
            if state.status is Status.TIERING and state.job_id == job_id and state.table_id not in reported:
                fail(state, f"tiering job {job_id} restarted while it tiered this table (epoch "
                            f"{state.tiering_epoch}); the round was abandoned and the table re-queued",
                     now, policy, out, outcome="abandoned", requeue_now=True)
                liveness.pop(state.table_id, None)

    def answer(kind: str, table_id: int, epoch: int, action) -> None:
        try:
            state = _check_entry(states, job_id, table_id, epoch)
            action(state)
            out.answers.append(Answer(kind, table_id, state.path, state.tiering_epoch))
        except TierlakeError as e:
            known = states.get(table_id)
            out.answers.append(Answer(kind, table_id, known.path if known else None, epoch, e.message))

    for entry in failed:
        answer("failed", entry.table_id, entry.tiering_epoch,
               lambda s, e=entry: fail(s, e.error_message, now, policy, out))
    for entry in tiering:
        answer("tiering", entry.table_id, entry.tiering_epoch,
               lambda s: liveness.__setitem__(s.table_id, now))
    for entry in finished:
        answer("finished", entry.table_id, entry.tiering_epoch,
               lambda s, e=entry: finish(s, e, now, out))
    if request_table:
        schedule(states, now, policy, liveness, out, quiet=quiet)
        pending = [s for s in states.values() if s.status is Status.PENDING]
        if pending:
            state = min(pending, key=lambda s: (s.pending_since or now, s.table_id))
            assign(state, job_id, now)
            liveness[state.table_id] = now
            out.changed.add(state.table_id)
            out.answers.append(Answer("assigned", state.table_id, state.path, state.tiering_epoch))
    return out
