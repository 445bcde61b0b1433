"""One differential case (issue 50 item 5): what tierlake gives against what plain Spark SQL gives on
plain Iceberg tables, for a generated tiered table and change stream (strategies.py).

The reference is a plain Iceberg table ``<db>_ref.changes`` holding every change of the case with
safe column names (``c0``, ``c1``, …), its change type (``ct``), commit (``cmt``) and position in the
commit (``pos``), written with the same literal text the case sends to tierlake. From it plain Spark
SQL computes what each step must give:

- which commits of a primary-key table cannot be ordered (two different changes of one key that
  ``sequence-by`` does not order: docs/tiering.md, "What lands in the lake"): an ``INSERT … VALUES``
  of one is refused (docs/ingest.md); an ``INSERT … SELECT`` or a CTAS is not checked for it at
  INSERT, so the round (or the CTAS's own round) must fail instead;
- the merged state: ``row_number() OVER (PARTITION BY key ORDER BY commit DESC, sequence-by DESC
  NULLS LAST, position DESC)``, the last change wins, ``-U`` skipped, a ``-D`` last removes the key;
  a log table: every row;
- aggregates (count, sum, min, max) over that state.

And tierlake is driven as a user and a worker would: DDL and writes through the gateway (PyHive),
every statement form (``VALUES``, ``INSERT … SELECT``, CTAS) and a ``tierlake.write.request-id``
retried sequentially (a second connection), concurrently, after the process's committers are dropped
(as after a restart), after the id's retention, after the first attempt was cancelled, and after its
client went away (strategies.RETRIES); rounds as a worker runs them
(``TableHandle.open`` on the coordinator's path, the planner with the coordinator's record,
``run_round``); the fresh view read in its local form (pending changes merged in the driver) and its
distributed form (``spark.tierlake.fresh.local-merge-rows`` = 0).

Rows are compared with ``EXCEPT ALL`` both ways (Spark's own equality: NaN = NaN, -0.0 = 0.0, BINARY
by content; maps as their sorted entries, Spark having no equality for maps). The first difference
raises a :class:`Divergence` subclass named by its stage, so Hypothesis tells the classes apart and
shrinks each to its own minimal example.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.server.differential.strategies import Case, Column, Commit, SqlType, quote, string_literal
from tierlake.server.changelog import fresh_view
from tierlake.server.changelog.handle import Assignment, TableHandle
from tierlake.server.changelog.planner import Registered, plan_round
from tierlake.server.coordinator.registration import registered_record
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.session import activate, iceberg_table, private_session
from tierlake.server.tiering.round import run_round

LOCAL_ROWS_CONF = "spark.tierlake.fresh.local-merge-rows"  # FreshMerge.LOCAL_ROWS_CONF
# The request-id retention the harness runs with (:func:`short_retention`): the ``retention`` retry waits
# past it, so its retry is answered from the snapshot that committed the id, which is kept.
RETENTION_SECONDS = 1.0


class _SharedOrExclusive:
    """Attempts of one request id in flight at once (``shared``) never see the committers dropped by
    another case's ``restart`` retry (``exclusive``): a real restart ends every attempt in flight, so two
    committers of one table never hold one id's attempts."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and self._shared == 0)
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


COMMITTERS = _SharedOrExclusive()


def forget_committers(spark: Any) -> None:
    """Every stream table's committer dropped, as a new server starts without them: the next statement's
    committer knows a request id only from the table's snapshots and ``sys.write_requests``."""
    jclass(STREAM_INGEST, spark.sparkContext._jvm).reset()


@contextlib.contextmanager
def short_retention(spark: Any, server: Any):
    """The server's request-id retention set to :data:`RETENTION_SECONDS` meanwhile (a server setting;
    the committer's is set directly, as tests/server/ingest/test_request_ids.py does)."""
    ingest = jclass(STREAM_INGEST, spark.sparkContext._jvm)
    ledger = iceberg_table(spark, "sys.write_requests")
    retention_ms = int(server.config.duration("tierlake.write.request-id-retention").total_seconds() * 1000)
    ingest.configureLedger(ledger, int(RETENTION_SECONDS * 1000))
    try:
        yield
    finally:
        ingest.configureLedger(ledger, retention_ms)
_counter = itertools.count()


class Divergence(AssertionError):
    stage = "divergence"


_STAGES: dict[str, type[Divergence]] = {}


def divergence(stage: str, message: str) -> Divergence:
    """An error of the class of ``stage`` (one class per stage: Hypothesis tells failures apart by type)."""
    cls = _STAGES.get(stage)
    if cls is None:
        name = "Divergence_" + "".join(ch if ch.isalnum() else "_" for ch in stage)
        cls = _STAGES[stage] = type(name, (Divergence,), {"stage": stage})
    return cls(f"[{stage}] {message}")


def comparable(expr: str, t: SqlType) -> str:
    """``expr`` as a value Spark can compare and group: a map as its entries, sorted."""
    return f"array_sort(map_entries({expr}))" if t.kind == "map" else expr


class Request:
    """One read of a case: a query whose rows have the same types as every other query of its
    ``kind`` (so that a :class:`Batcher` can run many in one ``UNION ALL``), read with the fresh view
    in its local or its ``distributed`` form. :meth:`rows` waits for it and raises what it raised."""

    def __init__(self, kind: str, distributed: bool, text: str):
        self.kind, self.distributed, self.text = kind, distributed, text
        self.batched = False         # answered by a batched query (else: run alone)
        self._done = threading.Event()
        self._rows: list[Any] | None = None
        self._error: BaseException | None = None

    def set(self, rows: list[Any] | None = None, error: BaseException | None = None, batched: bool = False) -> None:
        self._rows, self._error, self.batched = rows, error, batched
        self._done.set()

    def rows(self) -> list[Any]:
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._rows is not None
        return self._rows


# Settings for the harness's own sessions in the long mode (bench/differential.py): how Spark runs a
# query on a few rows, not what it answers. Without adaptive execution, with one shuffle partition and
# expressions interpreted rather than compiled (every case has new column types, so generated code is
# rarely reused), a comparison costs a third of its CPU time. The product's own statements (the
# gateway's sessions, rounds) keep the server's settings.
FEW_ROWS_SETTINGS = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1",
                     "spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def harness_session(spark: Any, few_rows: bool) -> Any:
    """A session of the harness's own, cloned from ``spark`` (and made this thread's active one)."""
    session = private_session(spark)
    if few_rows:
        for key, value in FEW_ROWS_SETTINGS.items():
            session.conf.set(key, value)
    return session


class Readers:
    """The sessions a case reads in: the fresh view's local form (the server's setting) and its
    distributed form (``spark.tierlake.fresh.local-merge-rows`` = 0), each a session of its own, so
    that reads of both forms (and rounds in other sessions) can run side by side. ``few_rows``: with
    :data:`FEW_ROWS_SETTINGS`."""

    def __init__(self, spark: Any, local: Any = None, few_rows: bool = False):
        self.local = local if local is not None else harness_session(spark, few_rows)
        self.distributed = harness_session(spark, few_rows)
        self.distributed.conf.set(LOCAL_ROWS_CONF, "0")

    def session(self, distributed: bool) -> Any:
        session = self.distributed if distributed else self.local
        activate(session)  # a view load resolves through the thread's active session
        return session

    def collect(self, distributed: bool, text: str) -> list[Any]:
        return self.session(distributed).sql(text).collect()


class Batcher:
    """Runs the reads of cases running side by side (bench/differential.py) together: the queries of
    one kind and form that are waiting are sent as one ``UNION ALL`` of the queries, each tagged with
    its request's number (one Spark job instead of one per read; each query is the very text a case
    run alone sends, so every comparison stays exact). A batch that fails is sent again one query at a
    time, so each request gets its own outcome. The case decides what a batched answer means: a
    comparison that shows a difference is asked again alone (:meth:`_Case.compare`).

    A batch is sent when every running case waits on it (:meth:`wait`), when its oldest request has
    waited ``max_wait`` seconds, or at ``max_batch`` requests."""

    def __init__(self, spark: Any, max_wait: float = 2.0, max_batch: int = 48, few_rows: bool = False):
        self.readers = Readers(spark, few_rows=few_rows)
        self.max_wait, self.max_batch = max_wait, max_batch
        self.cond = threading.Condition()
        self.pending: list[tuple[float, Request]] = []
        self.active = 0      # cases running (enter/leave)
        self.waiting = 0     # of them, those waiting on a request
        self.stopping = False
        self.batches = self.batched = self.alone = 0  # counters (bench)
        self.thread = threading.Thread(target=self._loop, name="differential-batcher", daemon=True)
        self.thread.start()

    @contextlib.contextmanager
    def case(self):
        with self.cond:
            self.active += 1
        try:
            yield
        finally:
            with self.cond:
                self.active -= 1
                self.cond.notify_all()

    def submit(self, kind: str, distributed: bool, text: str) -> Request:
        request = Request(kind, distributed, text)
        with self.cond:
            self.pending.append((time.monotonic(), request))
            self.cond.notify_all()
        return request

    def wait(self, request: Request) -> list[Any]:
        with self.cond:
            self.waiting += 1
            self.cond.notify_all()
        try:
            return request.rows()
        finally:
            with self.cond:
                self.waiting -= 1

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join(timeout=60)

    def _loop(self) -> None:
        while True:
            with self.cond:
                while True:
                    if self.stopping and not self.pending:
                        return
                    if self.pending:
                        oldest = self.pending[0][0]
                        left = oldest + self.max_wait - time.monotonic()
                        if (self.stopping or left <= 0 or self.waiting >= self.active
                                or len(self.pending) >= self.max_batch):
                            break
                        self.cond.wait(left)
                    else:
                        self.cond.wait()
                batch, self.pending = [r for _, r in self.pending], []
            groups: dict[tuple[str, bool], list[Request]] = {}
            for request in batch:
                groups.setdefault((request.kind, request.distributed), []).append(request)
            for (_, distributed), requests in groups.items():
                for start in range(0, len(requests), self.max_batch):
                    self._send(distributed, requests[start:start + self.max_batch])

    def _send(self, distributed: bool, requests: list[Request]) -> None:
        if len(requests) > 1:
            text = " UNION ALL ".join(f"SELECT {n} AS __dfx_request, * FROM ({r.text}) AS __dfx_{n}"
                                      for n, r in enumerate(requests))
            try:
                rows = self.readers.collect(distributed, text)
            except Exception:  # noqa: BLE001 - sent again one at a time below
                pass
            else:
                self.batches += 1
                self.batched += len(requests)
                by_request: list[list[Any]] = [[] for _ in requests]
                for row in rows:
                    by_request[row[0]].append(row[1:])
                for request, answer in zip(requests, by_request, strict=True):
                    request.set(answer, batched=True)
                return
        for request in requests:
            self.alone += 1
            try:
                request.set(self.readers.collect(distributed, request.text))
            except Exception as e:  # noqa: BLE001 - the request's outcome
                request.set(error=e)


class Harness:
    """Runs cases on one server: writes through its gateway, reads and drives rounds in its process.

    ``spark``: the session rounds run in (the server's by default; bench/differential.py gives each
    of its threads a session of its own, as a worker does each round thread); ``reference``: the
    session of the harness's own statements (the reference tables; ``spark`` by default). ``batcher``:
    reads sent together with other cases' (bench/differential.py); without one, each read runs alone.
    ``pool``: a list of gateway connections a case takes from and gives back (a user's sessions, which
    each write to many tables; the long mode's threads log in once, not three times a case)."""

    def __init__(self, server: Any, cleanup: bool = True, spark: Any = None, batcher: Batcher | None = None,
                 reference: Any = None, pool: list[Any] | None = None):
        self.server, self.cleanup = server, cleanup
        self.pool = pool  # gateway connections kept from case to case (bench/differential.py's threads)
        self.spark = spark if spark is not None else server.spark
        self._reference = reference if reference is not None else self.spark
        self.batcher = batcher
        self._readers: Readers | None = None
        self.port = server.gateway.port
        self._conns: list[Any] = []
        self.seconds: dict[str, float] = {}  # time per step of the last case (bench --verbose)

    @property
    def readers(self) -> Readers:
        if self.batcher is not None:
            return self.batcher.readers
        if self._readers is None:
            self._readers = Readers(self.spark, local=self.spark)
            activate(self.spark)
        return self._readers

    def submit(self, kind: str, distributed: bool, text: str) -> Request:
        """A read of this case (sent with others' when there is a batcher, else run now)."""
        if self.batcher is not None:
            return self.batcher.submit(kind, distributed, text)
        request = Request(kind, distributed, text)
        try:
            with self.step(kind):
                request.set(self.readers.collect(distributed, text))
        except Exception as e:  # noqa: BLE001 - raised by rows()
            request.set(error=e)
        finally:
            activate(self.spark)
        return request

    @property
    def reference(self) -> Any:
        """The harness's own session, active in this thread."""
        activate(self._reference)
        return self._reference

    def rows(self, request: Request) -> list[Any]:
        return self.batcher.wait(request) if self.batcher is not None else request.rows()

    def alone(self, distributed: bool, text: str) -> list[Any]:
        """``text`` run on its own, now (a batched answer checked again)."""
        try:
            return self.readers.collect(distributed, text)
        finally:
            activate(self.spark)

    @contextlib.contextmanager
    def step(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t

    # -- gateway connections -------------------------------------------------------------------

    def connect(self) -> Any:
        """A gateway connection for this case (one of the pool's, if there is a pool)."""
        from pyhive import hive
        from thrift.transport.TTransport import TTransportException

        if self.pool:
            conn = self.pool.pop()
        else:
            for attempt in range(5):
                try:
                    conn = hive.connect("127.0.0.1", self.port, username="differential")
                    break
                except TTransportException:
                    # A login the gateway's door turned away (a busy machine): log in again.
                    if attempt == 4:
                        raise
                    time.sleep(2 ** attempt)
        self._conns.append(conn)
        return conn

    def close(self, reuse: bool = True) -> None:
        """The case's connections closed (or back to the pool, unless ``reuse`` is false: a case that
        ended early may leave a session with a request id set)."""
        for conn in self._conns:
            if self.pool is not None and reuse:
                self.pool.append(conn)
                continue
            with contextlib.suppress(Exception):
                conn.close()
        self._conns.clear()

    @staticmethod
    def execute(conn: Any, statement: str, request_id: str | None = None) -> str | None:
        """None when the statement succeeded, else the error's text."""
        cursor = conn.cursor()
        try:
            if request_id is not None:
                cursor.execute(f"SET `tierlake.write.request-id`={request_id}")
            cursor.execute(statement)
            if cursor.description:
                cursor.fetchall()
            return None
        except Exception as e:  # noqa: BLE001 - the text is the outcome
            return f"{type(e).__name__}: {e}"[:2000]
        finally:
            with contextlib.suppress(Exception):
                cursor.close()

    # -- one case -------------------------------------------------------------------------------

    def run(self, case: Case) -> None:
        """Raises a :class:`Divergence` at the first difference from the reference."""
        db = f"dfx_{next(_counter)}_{uuid.uuid4().hex[:6]}"
        self.seconds = {}
        activate(self.spark)
        main = self.connect()
        ended = False
        try:
            with self.batcher.case() if self.batcher is not None else contextlib.nullcontext():
                _Case(self, case, db, main).run()
            ended = True
        finally:
            self.close(reuse=ended)
            if self.cleanup:
                with self.step("cleanup"):
                    self.drop(db, case)

    def drop(self, db: str, case: Case) -> None:
        conn = self.connect()
        try:
            self.execute(conn, f"DROP TABLE IF EXISTS {quote(db)}.{quote(case.table)}")
        finally:
            self.close()
        for database in (db, f"{db}_lake", f"{db}_fresh", f"{db}_ref"):
            with contextlib.suppress(Exception):
                self.reference.sql(f"DROP DATABASE IF EXISTS {quote(database)} CASCADE")


class _Case:
    def __init__(self, harness: Harness, case: Case, db: str, main: Any):
        self.h, self.case, self.db, self.main = harness, case, db, main
        self.cols = case.columns
        self.safe = [f"c{i}" for i in range(len(self.cols))]
        self.target = f"{quote(db)}.{quote(case.table)}"
        self.lake = f"{quote(db + '_lake')}.{quote(case.table)}"
        self.fresh = f"{quote(db + '_fresh')}.{quote(case.table)}"
        self.changes = f"{quote(db + '_ref')}.changes"
        self.accepted: list[int] = []   # commits that must be in the stream
        self.poisoned: int | None = None  # first accepted commit a round must refuse
        self.tiered = 0                  # commits the lake holds
        self.retry_conns: list[Any] = []
        self.deferred: tuple | None = None  # a `retention` retry not sent yet (send, retry_deferred)
        self.new_deferred: tuple | None = None
        self.refused_deferred = False

    # -- reference -----------------------------------------------------------------------------

    def setup_reference(self) -> None:
        spark, case = self.h.reference, self.case
        spark.sql(f"CREATE DATABASE {quote(self.db)}")
        spark.sql(f"CREATE DATABASE {quote(self.db + '_ref')}")
        defs = ", ".join(f"{s} {c.type.ddl}" for s, c in zip(self.safe, self.cols, strict=True))
        spark.sql(f"CREATE TABLE {self.changes} ({defs}, ct STRING, cmt INT, pos INT) USING iceberg")
        values = []
        for i, commit in enumerate(case.commits):
            for j, row in enumerate(commit.rows):
                ct = "CAST(NULL AS STRING)" if row[-1] is None else string_literal(row[-1])
                values.append("(" + ", ".join([*row[:-1], ct, str(i), str(j)]) + ")")
        try:
            spark.sql(f"INSERT INTO {self.changes} VALUES " + ", ".join(values))
            self.reference_error = None
        except Exception as e:  # noqa: BLE001 - plain Iceberg cannot hold these values (see run)
            self.reference_error = str(e).split("\n", 1)[0][:500]
        # The same schema under the same names as a plain Iceberg table: what plain Spark accepts.
        try:
            spark.sql(f"CREATE TABLE {quote(self.db + '_ref')}.{quote(case.table)} ({self.column_defs()}) "
                      "USING iceberg")
            self.plain_create_error = None
        except Exception as e:  # noqa: BLE001
            self.plain_create_error = str(e)[:500]

    def column_defs(self) -> str:
        return ", ".join(f"{quote(c.name)} {c.type.ddl}" for c in self.cols)

    def ambiguous_commits(self) -> set[int]:
        """Commits of a primary-key table with two different changes of one key that sequence-by does
        not order (-U rows are no change; a -D's other values do not matter; equal changes never
        conflict; with sequence-by a NULL value among several changes, or a tie at the largest value)."""
        if not self.case.pk:
            return set()
        keys = [self.safe[i] for i in range(len(self.case.keys))]
        part = ", ".join(["cmt", *keys])
        row = ", ".join(comparable(s, c.type) for s, c in zip(self.safe, self.cols, strict=True))
        effect = f"named_struct('del', ct <=> '-D', 'row', CASE WHEN ct <=> '-D' THEN NULL ELSE struct({row}) END)"
        if self.case.sequence_by is None:
            having = "count(DISTINCT eff) > 1"
            seq_cols = ""
        else:
            seq = self.safe[len(self.case.keys)]
            seq_cols = (f", max({seq}) OVER (PARTITION BY {part}) AS mx, count(*) OVER (PARTITION BY {part}) AS n, "
                        f"count({seq}) OVER (PARTITION BY {part}) AS nseq, {seq} AS sq")
            having = ("CASE WHEN max(n) > 1 AND max(nseq) < max(n) THEN count(DISTINCT eff) > 1 "
                      "ELSE count(DISTINCT CASE WHEN sq <=> mx THEN eff END) > 1 END")
        query = (f"SELECT DISTINCT cmt FROM (SELECT cmt, {', '.join(keys)}, {effect} AS eff{seq_cols} "
                 f"FROM {self.changes} WHERE ct IS NULL OR ct <> '-U') GROUP BY {part} HAVING {having}")
        return {r[0] for r in self.h.rows(self.h.submit("ambiguous", False, query))}

    def expected(self, upto: int) -> str:
        """The plain-Spark state after the accepted commits before ``upto``: a query over ``changes``."""
        commits = [c for c in self.accepted if c < upto] or [-1]
        where = f"cmt IN ({', '.join(map(str, commits))})"
        cols = ", ".join(self.safe)
        if not self.case.pk:
            return f"SELECT {cols} FROM {self.changes} WHERE {where}"
        keys = ", ".join(self.safe[: len(self.case.keys)])
        order = "cmt DESC" + (f", {self.safe[len(self.case.keys)]} DESC NULLS LAST" if self.case.sequence_by else "")
        return (f"SELECT {cols} FROM (SELECT *, row_number() OVER (PARTITION BY {keys} ORDER BY {order}, pos DESC) "
                f"AS rn FROM {self.changes} WHERE {where} AND (ct IS NULL OR ct <> '-U')) "
                "WHERE rn = 1 AND (ct IS NULL OR ct <> '-D')")

    # -- comparisons ---------------------------------------------------------------------------

    def compare(self, stage: str, actual_from: str, expected_query: str, with_change_type: bool = False,
                distributed: bool = False) -> None:
        self.compare_later(stage, actual_from, expected_query, with_change_type, distributed)()

    def compare_later(self, stage: str, actual_from: str, expected_query: str, with_change_type: bool = False,
                      distributed: bool = False) -> Callable[[], None]:
        """Sends the comparison; the function returned waits for it and raises its divergence.
        ``distributed``: the fresh view read in its distributed form."""
        a_cols = [comparable(quote(c.name), c.type) + f" AS c{i}" for i, c in enumerate(self.cols)]
        e_cols = [comparable(s, c.type) + f" AS c{i}" for i, (s, c) in enumerate(zip(self.safe, self.cols,
                                                                                        strict=True))]
        if with_change_type:
            a_cols.append(f"`_change_type` AS c{len(a_cols)}")
            e_cols.append(f"ct AS c{len(e_cols)}")
        actual = f"SELECT {', '.join(a_cols)} FROM {actual_from}"
        expected = f"SELECT {', '.join(e_cols)} FROM ({expected_query})"
        # EXCEPT ALL both ways in one aggregate (one shuffle): rows grouped by Spark's equality, each
        # group counted on both sides.
        group = ", ".join(f"c{i}" for i in range(len(a_cols)))
        text = (f"SELECT coalesce(sum(greatest(e - a, 0)), 0) AS missing, "
                f"coalesce(sum(greatest(a - e, 0)), 0) AS extra FROM ("
                f"SELECT {group}, sum(side) AS a, sum(1 - side) AS e FROM ("
                f"SELECT *, 1 AS side FROM ({actual}) UNION ALL SELECT *, 0 AS side FROM ({expected})) "
                f"GROUP BY {group} HAVING a <> e)")
        request = self.h.submit("compare", distributed, text)

        def finish() -> None:
            with self.h.step("compare"):
                try:
                    (missing, extra), = self.h.rows(request)
                    if (missing or extra) and request.batched:
                        # Batched with other cases' reads: this case's difference is checked alone.
                        (missing, extra), = self.h.alone(distributed, text)
                        if not (missing or extra):
                            raise divergence(f"{stage}-batched",
                                             f"{actual_from}: differs from plain Spark when read in one query "
                                             "with other cases' reads, not when read alone")
                except Divergence:
                    raise
                except Exception as e:  # noqa: BLE001
                    raise divergence(f"{stage}-query-failed",
                                     f"{actual_from}: {str(e)[:1500]}{self.plain_view()}") from None
            if missing or extra:
                raise divergence(stage, f"{actual_from}: {missing} expected row(s) missing, {extra} unexpected;\n"
                                        f"  tierlake: {self.show(actual, distributed)}\n"
                                        f"  spark:    {self.show(expected)}")
        return finish

    def plain_view(self) -> str:
        """Whether a plain Spark view over a plain Iceberg table of the same schema reads (for a fresh
        view that fails: is it Spark's view machinery or tierlake's view?)."""
        plain = f"{quote(self.db + '_ref')}.{quote(self.case.table)}"
        view = f"{quote(self.db + '_ref')}.plain_view"
        try:
            spark = self.h.reference
            spark.sql(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {plain}")
            spark.sql(f"SELECT * FROM {view}").collect()
            return "\n  (a plain Spark view over a plain Iceberg table of the same schema reads)"
        except Exception as e:  # noqa: BLE001
            return f"\n  (a plain Spark view over a plain Iceberg table of the same schema fails too: {str(e)[:300]})"

    def show(self, query: str, distributed: bool = False) -> list[str]:
        try:
            rows = self.h.alone(distributed, f"SELECT CAST(struct(*) AS STRING) FROM ({query}) LIMIT 12")
            return [r[0] for r in rows]
        except Exception as e:  # noqa: BLE001
            return [f"(not shown: {str(e)[:200]})"]

    def aggregates(self, t: Column, expr: str) -> list[str]:
        out = []
        if t.type.numeric and t.type.kind != "float":
            out.append(f"CAST(sum({expr}) AS STRING)")
        if t.type.kind == "float":
            out.append(f"CAST(sum({expr}) AS STRING)")
        if t.type.orderable:
            out += [f"CAST(min({expr}) AS STRING)", f"CAST(max({expr}) AS STRING)"]
        return out

    def compare_aggregates(self, stage: str, relation: str, expected_query: str, distributed: bool = False) -> None:
        self.compare_aggregates_later(stage, relation, expected_query, distributed)()

    def compare_aggregates_later(self, stage: str, relation: str, expected_query: str,
                                 distributed: bool = False) -> Callable[[], None]:
        a_exprs, e_exprs, floats = ["CAST(count(*) AS STRING)"], ["CAST(count(*) AS STRING)"], [False]
        for s, c in zip(self.safe, self.cols, strict=True):
            a = self.aggregates(c, quote(c.name))
            a_exprs += a
            e_exprs += self.aggregates(c, s)
            floats += [c.type.kind == "float"] * len(a)
        # Each side's aggregates as one ARRAY<STRING> (the same expressions; one row type for every case).
        actual_text = f"SELECT array({', '.join(a_exprs)}) AS v FROM {relation}"
        expected_text = f"SELECT array({', '.join(e_exprs)}) AS v FROM ({expected_query})"
        actual_request = self.h.submit("aggregates", distributed, actual_text)
        expected_request = self.h.submit("aggregates", False, expected_text)

        def differences(actual: list, expected: list) -> str | None:
            for name, x, y, fl in zip(e_exprs, actual, expected, floats, strict=True):
                if not same_value(x, y, fl):
                    return f"{relation}: {name}: tierlake {x!r}, spark {y!r}"
            return None

        def finish() -> None:
            with self.h.step("aggregates"):
                try:
                    actual = list(self.h.rows(actual_request)[0][0])
                except Exception as e:  # noqa: BLE001
                    raise divergence(f"{stage}-query-failed", f"{relation}: {str(e)[:1500]}") from None
                expected = list(self.h.rows(expected_request)[0][0])
                found = differences(actual, expected)
                if found and (actual_request.batched or expected_request.batched):
                    # Batched with other cases' reads: this case's difference is checked alone.
                    try:
                        actual = list(self.h.alone(distributed, actual_text)[0][0])
                    except Exception as e:  # noqa: BLE001
                        raise divergence(f"{stage}-query-failed", f"{relation}: {str(e)[:1500]}") from None
                    expected = list(self.h.alone(False, expected_text)[0][0])
                    if differences(actual, expected) is None:
                        raise divergence(f"{stage}-batched", f"{found} in one query with other cases' reads; "
                                                             "equal when read alone")
                    found = differences(actual, expected)
            if found:
                raise divergence(stage, found)
        return finish

    # -- tierlake's side -----------------------------------------------------------------------

    def properties(self) -> str:
        props = {"table.datalake.enabled": "true", "table.datalake.freshness": "1 h"}
        if self.case.pk:
            props["primary-key"] = ", ".join(self.case.keys)
            props["bucket.num"] = "2"
        if self.case.sequence_by:
            props["sequence-by"] = self.case.sequence_by
        return ", ".join(f"{string_literal(k)}={string_literal(v)}" for k, v in props.items())

    def insert_columns(self) -> str:
        return ", ".join([quote(c.name) for c in self.cols] + (["`_change_type`"] if self.case.pk else []))

    def statement(self, i: int) -> str:
        commit = self.case.commits[i]
        if commit.form == "values":
            rows = []
            for row in commit.rows:
                ct = ["CAST(NULL AS STRING)" if row[-1] is None else string_literal(row[-1])] if self.case.pk else []
                rows.append("(" + ", ".join([*row[:-1], *ct]) + ")")
            return f"INSERT INTO {self.target} ({self.insert_columns()}) VALUES " + ", ".join(rows)
        select = ", ".join(self.safe + (["ct"] if self.case.pk else []))
        return (f"INSERT INTO {self.target} ({self.insert_columns()}) SELECT {select} FROM {self.changes} "
                f"WHERE cmt = {i}")

    def send(self, i: int) -> list[tuple[str, str | None]]:
        """The outcome of each attempt whose outcome is known (None: acknowledged), with its label. A
        cancelled first attempt, or one whose client went away, may or may not have committed: only its
        retry's outcome is known, and the stream must then hold the rows once."""
        commit, text = self.case.commits[i], self.statement(i)
        if commit.retry is None:
            return [("the only attempt", self.h.execute(self.main, text))]
        while len(self.retry_conns) < 2:
            self.retry_conns.append(self.h.connect())
        request_id = f"dfx-{uuid.uuid4().hex[:12]}"
        first, second = self.retry_conns
        labels = [f"attempt {k} of 2 ({commit.retry})" for k in (1, 2)]
        if commit.retry == "sequential":
            return list(zip(labels, [self.h.execute(conn, text, request_id) for conn in self.retry_conns],
                            strict=True))
        if commit.retry == "restart":
            outcome = self.h.execute(first, text, request_id)
            with COMMITTERS.exclusive():  # no other case's attempts of one id in flight meanwhile
                forget_committers(self.h.server.spark)
            return list(zip(labels, [outcome, self.h.execute(second, text, request_id)], strict=True))
        if commit.retry == "retention":
            # The retry is sent once the id's retention has passed and another commit of the table (the
            # case's next, which makes the committer prune its ids) has landed: :meth:`retry_deferred`.
            self.new_deferred = (i, text, request_id, labels[1], time.monotonic() + RETENTION_SECONDS + 1.2)
            return [(labels[0], self.h.execute(first, text, request_id))]
        with COMMITTERS.shared():
            if commit.retry == "concurrent":
                return list(zip(labels, self.at_once(text, request_id), strict=True))
            self.give_up(commit, text, request_id)
            return [(labels[1], self.h.execute(second, text, request_id))]

    def at_once(self, text: str, request_id: str) -> list[str | None]:
        outcomes: list[str | None] = [None, None]
        barrier = threading.Barrier(2)

        def attempt(k: int) -> None:
            cursor = self.retry_conns[k].cursor()
            try:
                cursor.execute(f"SET `tierlake.write.request-id`={request_id}")
                barrier.wait(timeout=60)
                cursor.execute(text)
            except Exception as e:  # noqa: BLE001
                outcomes[k] = f"{type(e).__name__}: {e}"[:2000]

        threads = [threading.Thread(target=attempt, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        return outcomes

    def give_up(self, commit: Commit, text: str, request_id: str) -> None:
        """The first attempt sent asynchronously, then after ``commit.delay`` seconds cancelled by its
        client (``cancelled``: Thrift CancelOperation, waited for until the operation ends) or given up
        with its connection (``disconnected``: the socket closed without closing the session, as a client
        that was killed)."""
        from pyhive import hive

        if commit.retry == "disconnected":
            conn = hive.connect("127.0.0.1", self.h.port, username="differential")
        else:
            conn = self.retry_conns[0]
        cursor = conn.cursor()
        try:
            cursor.execute(f"SET `tierlake.write.request-id`={request_id}")
            cursor.execute(text, async_=True)
            time.sleep(commit.delay)
            if commit.retry == "disconnected":
                conn._transport.close()
                return
            cursor.cancel()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                state = cursor.poll().operationState
                if state not in (0, 1, 6):  # INITIALIZED, RUNNING, PENDING: not ended yet
                    return
                time.sleep(0.05)
            raise divergence("cancel-hangs", f"{text}\n  still running 120 s after its cancel")
        except Divergence:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the first attempt's end, its retry decides
            self.case.notes.append(f"first attempt ({commit.retry}): {type(e).__name__}: {str(e)[:200]}")
        finally:
            with contextlib.suppress(Exception):
                cursor.close()

    def create(self) -> bool:
        """The tiered table, by CREATE or by CTAS (its first commit); False when it must not exist."""
        case = self.case
        if case.commits[0].form == "ctas":
            select = ", ".join(f"{s} AS {quote(c.name)}" for s, c in zip(self.safe, self.cols, strict=True))
            text = (f"CREATE TABLE {self.target} TBLPROPERTIES ({self.properties()}) AS SELECT {select} "
                    f"FROM {self.changes} WHERE cmt = 0")
        else:
            text = f"CREATE TABLE {self.target} ({self.column_defs()}) TBLPROPERTIES ({self.properties()})"
        error = self.h.execute(self.main, text)
        ctas_refused = case.commits[0].form == "ctas" and 0 in self.ambiguous
        if error is None:
            if ctas_refused:
                raise divergence("ctas-accepted-unordered",
                                 f"{text}\n  commit 0 has changes of one key it cannot order")
            if self.plain_create_error is not None:
                # Plain Spark refuses the schema, tierlake takes it: carry on, the reference has safe names.
                case.notes.append(f"plain Iceberg refused the schema ({self.plain_create_error[:200]}); "
                                  "tierlake took it")
            if case.commits[0].form == "ctas":
                self.accepted.append(0)
                self.tiered = 1
            return True
        if self.plain_create_error is None and not ctas_refused and self.limitation() is None:
            plain = self.plain_round_trip()
            if plain is None:
                left = self.leftovers()
                raise divergence("create-refused", f"{text}\n  -> {error}"
                                                   + (f"\n  and it left behind: {left}" if left else ""))
            case.notes.append(f"tierlake refused the table, plain Iceberg cannot write and read it back: {plain}")
        self.nothing_left_behind(text, error)
        return False

    def plain_round_trip(self) -> str | None:
        """The first commit written to the plain table of the same schema and names, and read back:
        None, or why plain Spark and Iceberg cannot."""
        plain = f"{quote(self.db + '_ref')}.{quote(self.case.table)}"
        try:
            spark = self.h.reference
            spark.sql(f"INSERT INTO {plain} SELECT {', '.join(self.safe)} FROM {self.changes} WHERE cmt = 0")
            spark.sql(f"SELECT * FROM {plain}").collect()
            return None
        except Exception as e:  # noqa: BLE001
            return str(e).split("\n", 1)[0][:300]

    def limitation(self) -> str | None:
        """Why tierlake may refuse this table at CREATE, by its documented rules (docs/tiering.md): its
        key and sequence-by columns are named in property values, which take names that read as
        identifiers; a first key column of a type Iceberg cannot bucket. A refusal must leave nothing."""
        case = self.case
        for name in all_names(case.columns):
            if name.lower().startswith("__tierlake"):
                return f"{name!r}: names starting with __tierlake are reserved for tierlake's generated names"
        for name in struct_field_names(case.columns):
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                return (f"STRUCT field name {name!r}: the metastore keeps column types as Hive type text with "
                        "field names unquoted (a plain Iceberg table holds it; a Spark view over it cannot)")
        for c in case.columns:
            if c.name.lower() == "_change_type":
                return "_change_type is the change-type column of primary-key streams, reserved in every table"
        for name in [*case.keys, *([case.sequence_by] if case.sequence_by else [])]:
            if not re.match(r"^[A-Za-z_]\w*$", name):
                return f"key or sequence-by column {name!r} does not read as an identifier"
        if case.pk and case.columns[0].type.kind in ("bool", "float"):
            return f"first key column of type {case.columns[0].type.ddl}, which Iceberg cannot bucket"
        return None

    def leftovers(self) -> list[str]:
        """What of the table exists: stream, lake, fresh view, registration."""
        left = []
        name = self.case.table.lower()
        for database in (self.db, f"{self.db}_lake", f"{self.db}_fresh"):
            try:
                rows = self.h.reference.sql(f"SHOW TABLES IN {quote(database)}").collect()
            except Exception:  # noqa: BLE001 - no such database
                continue
            left += [f"{database}.{r.tableName}" for r in rows if not r.isTemporary and r.tableName.lower() == name]
        _, states = self.h.server.coordinator.load()
        left += [f"registration {s.path}" for s in states.values() if s.path.split(".", 1)[0] == self.db]
        return left

    def nothing_left_behind(self, text: str, error: str) -> None:
        left = self.leftovers()
        if left:
            raise divergence("failed-create-left-behind", f"{text}\n  -> {error[:300]}\n  left: {left}")

    def tier(self, upto: int) -> None:
        """A round as a worker runs it; what the lake then holds."""
        server = self.h.server
        _, states = server.coordinator.load()
        mine = [s for s in states.values() if s.path.split(".", 1)[0] == self.db]
        if len(mine) != 1:
            raise divergence("registration", f"registrations of {self.target}: {[s.path for s in mine]}")
        state = mine[0]
        must_fail = self.poisoned is not None and self.poisoned < upto
        try:
            with self.h.step("round"):
                spark = self.h.spark
                activate(spark)
                handle = TableHandle.open(spark, server.config, state.path,
                                          Assignment(state.table_id, state.tiering_epoch, "differential"))
                record = registered_record(spark, state.table_id)
                plan = plan_round(handle, registered=None if record is None else Registered(*record))
                # As a worker does (tiering/worker.py): the re-pin scheduled after the round, which
                # the harness waits for, so the view read next is the re-pinned one. The re-pin thread
                # is given the table in the server's session: the process's one re-pin thread belongs
                # to the session it is asked with, and cases side by side each tier in their own.
                result = run_round(plan, check_epoch=lambda: None, defer_repin=True)
                if result.commits or result.schema_changed:
                    fresh_view.after_lake_commit(handle.in_session(server.spark))
                settle_repin(handle)
            error = None
        except Exception as e:  # noqa: BLE001
            error = f"{type(e).__name__}: {e}"[:1500]
        if error is not None and not must_fail:
            raise divergence("round-failed", f"round of {self.target} after commit {upto - 1}: {error}")
        if error is None and must_fail:
            raise divergence("round-tiered-unordered",
                             f"round of {self.target} tiered commit {self.poisoned}, whose changes it cannot order")
        if error is None:
            self.tiered = upto
        self.compare("lake", self.lake, self.expected(self.tiered))

    def check_fresh(self, stage: str) -> None:
        """The fresh view in its local and its distributed form, rows and aggregates: the four reads
        sent at once (nothing changes between them), their divergences raised in this order."""
        expected = self.expected(len(self.case.commits))
        for finish in [self.compare_later(f"{stage}-local", self.fresh, expected),
                       self.compare_aggregates_later(f"{stage}-aggregates-local", self.fresh, expected),
                       self.compare_later(f"{stage}-distributed", self.fresh, expected, distributed=True),
                       self.compare_aggregates_later(f"{stage}-aggregates-distributed", self.fresh, expected,
                                                     distributed=True)]:
            finish()

    def write(self, i: int) -> None:
        commit = self.case.commits[i]
        refused = i in self.ambiguous and commit.form == "values"
        # An INSERT … SELECT of such changes is not checked at INSERT (docs/ingest.md): the round fails
        # on it instead; refusing it at INSERT is as good.
        may_refuse = i in self.ambiguous and commit.form == "select"
        if self.deferred is not None:  # past the retention before this commit, which prunes the committer's ids
            time.sleep(max(0.0, self.deferred[4] - time.monotonic()))
        with self.h.step("write"):
            outcomes = self.send(i)
        if may_refuse and all(error is not None for _, error in outcomes):
            refused = True
        for k, (attempt, error) in enumerate(outcomes):
            if refused and error is None:
                raise divergence("unordered-values-accepted",
                                 f"commit {i}, {attempt}: acknowledged, but it changes a key in ways no order decides")
            if not refused and error is not None:
                stage = "retry-refused" if k or commit.retry in ("cancelled", "disconnected") else "write-refused"
                raise divergence(stage, f"commit {i} ({commit.form}), {attempt}: {error}")
        if not refused:
            self.accepted.append(i)
            if i in self.ambiguous and self.poisoned is None:
                self.poisoned = i
        if commit.retry:
            self.check_stream(f"retry-{commit.retry}-{commit.form}")
        if self.deferred is not None:  # an earlier commit's, due now that this one landed
            self.retry_deferred()
        if self.new_deferred is not None:
            self.deferred, self.new_deferred, self.refused_deferred = self.new_deferred, None, refused
            if i == len(self.case.commits) - 1:  # no commit after it: the retry after the retention only
                time.sleep(max(0.0, self.deferred[4] - time.monotonic()))
                self.retry_deferred()

    def retry_deferred(self) -> None:
        """The ``retention`` retry of an earlier commit, sent now: it must be answered as its first attempt
        was (acknowledged, nothing written; or refused again), from the snapshot that committed the id."""
        i, text, request_id, label, _ = self.deferred
        self.deferred = None
        commit = self.case.commits[i]
        error = self.h.execute(self.retry_conns[1], text, request_id)
        if self.refused_deferred and error is None:
            raise divergence("unordered-values-accepted", f"commit {i}, {label}: acknowledged, but it changes a key "
                                                          "in ways no order decides")
        if not self.refused_deferred and error is not None:
            raise divergence("retry-refused", f"commit {i} ({commit.form}), {label}: {error}")
        self.check_stream(f"retry-retention-{commit.form}")

    def check_stream(self, stage: str = "stream") -> None:
        self.compare(stage, self.target, f"SELECT * FROM {self.changes} WHERE cmt IN "
                                         f"({', '.join(map(str, self.accepted or [-1]))})",
                     with_change_type=self.case.pk)

    def run(self) -> None:
        with self.h.step("reference"):
            self.setup_reference()
        if self.reference_error is not None:
            # Plain Iceberg cannot hold these values (a struct field name Hive 2.3's type parser reads
            # wrongly, say): tierlake refuses the table cleanly, or takes it (then nothing to compare).
            self.ambiguous = set()
            self.plain_create_error = self.plain_create_error or self.reference_error
            self.create()
            self.case.notes.append(f"plain Iceberg could not write the changes: {self.reference_error}")
            return
        with self.h.step("reference"):
            self.ambiguous = self.ambiguous_commits()
        with self.h.step("create"):
            created = self.create()
        if not created:
            return
        case = self.case
        first = 1 if case.commits[0].form == "ctas" else 0
        for i in range(first, len(case.commits)):
            if i == case.cut and i > first:
                self.tier(i)
            self.write(i)
        self.check_stream()
        if case.cut >= len(case.commits) and case.cut > first:
            self.tier(len(case.commits))
        if self.poisoned is None:
            self.check_fresh("fresh")
        self.tier(len(case.commits))
        if self.poisoned is None:
            self.compare("fresh-after-round", self.fresh, self.expected(len(case.commits)))


def struct_field_names(columns: list[Column]) -> list[str]:
    """Nested struct-field names of ``columns``, at any depth."""
    out = []

    def visit(t: SqlType) -> None:
        if t.kind == "struct":
            for name, ft in t.children:
                out.append(name)
                visit(ft)
        elif t.kind in ("array", "map"):
            for child in t.children:
                visit(child)

    for c in columns:
        visit(c.type)
    return out


def all_names(columns: list[Column]) -> list[str]:
    """Column and nested struct-field names."""
    return [c.name for c in columns] + struct_field_names(columns)


def same_value(x: str | None, y: str | None, floating: bool) -> bool:
    if x == y:
        return True
    if x is None or y is None:
        return False
    if not floating:
        return False
    try:
        a, b = float(x), float(y)
    except ValueError:
        return False
    if math.isnan(a) and math.isnan(b):
        return True
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300)


def settle_repin(handle: TableHandle, timeout: float = 120.0) -> None:
    """Wait until the fresh-view re-pin of ``handle``'s table scheduled so far has run (not every
    table's, as ``fresh_view.settle`` does: with cases side by side the queue never empties)."""
    current = fresh_view._repinner  # the process's re-pin thread, read only
    if current is None:
        return
    key = str(handle.stream).lower()  # Repinner.schedule's key
    deadline = time.monotonic() + timeout
    with current.cond:
        while key in current.pending or current.running == key:
            left = deadline - time.monotonic()
            if left <= 0 or not current.thread.is_alive():
                return
            current.cond.wait(left)


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t
