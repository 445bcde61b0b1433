"""The write path of stream tables (docs/ingest.md).

``INSERT INTO`` a stream table arrives at the gateway, which hands it here
instead of relaying it to Spark's Thrift Server:

1. :meth:`StreamWriter.stage` — Spark parses and analyses the statement in
   the client's own session (its current database, temporary views and
   settings): Spark decides the table, the columns, the types and the casts.
   Anything that is not an append into a table with
   ``table.datalake.enabled`` is left to Spark as before.
2. :meth:`StreamWriter.write` — a primary-key table's rows are checked
   (change types, NULL keys, changes to one key that sequence-by does not
   order) and refused with a clear error before anything
   is written; the statement is committed by the table's committer
   (``ingest/java/StreamIngest.java``): plain values without a Spark job,
   grouped with the other statements waiting for the same table into one
   Iceberg transaction; a query as a Spark job holding the table's commit
   lock. The call returns once the commit holding the rows landed.

A write tagged with a request id (server/ingest/request_ids.py: the
gateway hands the write the key of the session's ``tierlake.write.request-id``
and its user) writes nothing if that key is already committed to the table:
checked under the table's commit lock, for values and queries alike. A write
whose client cancels it or goes away (:mod:`tierlake.server.runtime.operations`)
is dropped unless its commit already began.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from tierlake.server.catalog.properties import WRITE_REQUEST_ID
from tierlake.server.catalog.spec import CHANGE_TYPE, CHANGE_TYPES, TieredSpec
from tierlake.server.exceptions import (
    AmbiguousChangesError,
    InvalidChangeTypeError,
    NullKeyError,
    OperationCancelledError,
    WriteOutcomeUnknownError,
)
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.runtime import jvm_errors, operations
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.jvm_errors import Kind

log = logging.getLogger("tierlake.ingest")

REQUEST_ID = WRITE_REQUEST_ID
ALLOWED = ", ".join(CHANGE_TYPES) + " or NULL (upsert)"


@dataclass
class Staged:
    """An analysed INSERT into a stream table, not yet written."""

    jstaged: Any
    table: str  # as the catalog names it (``spark_catalog.shop.orders``)
    spec: TieredSpec
    local: bool  # plain values: written without a Spark job
    rows: int  # rows of a local statement, -1 for a query
    request_id: str | None = None  # the session's tierlake.write.request-id (set by the gateway)
    request_key: str | None = None  # what it is recorded under (request_ids.RequestKeys.key)

    @property
    def short_name(self) -> str:
        parts = self.table.split(".")
        return ".".join(parts[-2:])


@dataclass(frozen=True)
class WriteResult:
    rows: int  # rows written; 0 for a query (Spark does not count them here) or a duplicate
    duplicate: bool  # the request id was already committed: nothing written


class StreamWriter:
    """Stages and commits INSERTs into stream tables (one per process).

    Two JVM calls per statement besides the analysis: ``describe`` and
    ``commit`` (checks, request id, write and commit happen in the JVM)."""

    def __init__(self, jvm: Any = None):
        self._jvm = jvm
        self._specs: dict[str, TieredSpec] = {}
        self._described: dict[str, tuple[str, TieredSpec, bool, int]] = {}  # describe()'s text → its reading

    def _ingest(self) -> Any:
        return jclass(STREAM_INGEST, self._jvm)

    def stage(self, jsession: Any, statement: str, parsed: Any = None) -> Staged | None:
        """Spark's analysis of ``statement`` in ``jsession`` (``parsed``: Spark's
        parse of it, when the authoriser already made it); None unless it
        appends to a stream table. Spark's own errors propagate. A plain ``VALUES``
        statement's analysed form is kept for its template (:meth:`stage_cached`)."""
        ingest = self._ingest()
        jstaged = (ingest.stage(jsession, statement) if parsed is None
                   else ingest.stageParsed(jsession, statement, parsed))
        return None if jstaged is None else self._staged(jstaged)

    def stage_cached(self, jsession: Any, statement: str) -> Staged | None:
        """``statement`` staged without Spark's parse and analysis when a statement of the same
        template (its text but for plain literals, their types, the session's settings, current
        namespace and role) was analysed before and the table has not changed since
        (ingest/java/ValuesTemplates.java); else None, and the caller stages it with Spark."""
        jstaged = self._ingest().stageCached(jsession, statement)
        return None if jstaged is None else self._staged(jstaged)

    def _staged(self, jstaged: Any) -> Staged:
        described = str(jstaged.describe())
        found = self._described.get(described)
        if found is None:
            decoded = json.loads(described)
            properties = decoded["properties"]
            cache_key = json.dumps(properties, sort_keys=True)
            spec = self._specs.get(cache_key)
            if spec is None:
                spec = TieredSpec.from_properties({str(k): str(v) for k, v in properties.items()})
                if len(self._specs) > 1024:
                    self._specs.clear()
                self._specs[cache_key] = spec
            found = (decoded["name"], spec, bool(decoded["local"]), int(decoded["rows"]))
            if len(self._described) > 1024:
                self._described.clear()
            self._described[described] = found
        name, spec, local, rows = found
        return Staged(jstaged, name, spec, local, rows)

    def write(self, staged: Staged) -> WriteResult:
        """Check and commit ``staged``; returns once its commit landed. A cancel of the
        statement running on this thread (operations.current) drops it unless its
        commit already began."""
        spec = staged.spec
        name = staged.short_name
        if staged.request_id is not None and staged.request_key is None:
            raise AssertionError("a request id without its key")  # the gateway computes it (request_ids)
        staged.jstaged.requestKey(staged.request_key)
        control = operations.current()
        unregister = control.on_cancel(staged.jstaged.cancel) if control is not None else (lambda: None)
        try:
            outcome = json.loads(str(staged.jstaged.commit(
                CHANGE_TYPE if spec.is_primary_key else None, "\n".join(spec.primary_key), spec.sequence_by)))
        except Exception as e:
            raise self._typed(e, name, spec) from e
        finally:
            unregister()
        if outcome["outcome"] == "ok":
            return WriteResult(int(outcome["rows"]), False)
        if outcome["outcome"] == "duplicate":
            log.debug("INSERT into %s with request id %r: already committed, nothing written", name,
                      staged.request_id)
            return WriteResult(0, True)
        raise self._refused(name, spec, outcome["kind"], int(outcome["count"]), str(outcome["value"]))

    @staticmethod
    def _refused(name: str, spec: TieredSpec, kind: str, count: int, value: str) -> Exception:
        """The typed error of local rows the checks refused (StreamIngest.Refused's kind, count, value)."""
        if kind == "ambiguous":
            why = (f"their sequence-by values ({spec.sequence_by}) are NULL or tie at the largest"
                   if spec.sequence_by else "the table declares no sequence-by")
            fix = (f"give them distinct {spec.sequence_by} values" if spec.sequence_by
                   else "send them in separate statements (the later one wins) or declare 'sequence-by'")
            return AmbiguousChangesError(
                f"INSERT into {name} refused: {count} key(s) with different changes in one statement that cannot "
                f"be ordered ({why}), e.g. key {value}; {fix}. Nothing was written")
        if kind == "change_type":
            return InvalidChangeTypeError(
                f"INSERT into {name} refused: {count} row(s) with a _change_type outside {ALLOWED}: {value}. "
                "Nothing was written")
        return NullKeyError(
            f"INSERT into {name} refused: {count} row(s) with a NULL key column "
            f"({', '.join(spec.primary_key)}); key columns must not be NULL. Nothing was written")

    @staticmethod
    def _typed(e: Exception, name: str, spec: TieredSpec) -> Exception:
        found = jvm_errors.failure(e)
        if jvm_errors.is_(found, Kind.INGEST_CANCELLED):
            return OperationCancelledError(f"INSERT into {name} was cancelled before its commit: nothing was written")
        if found is not None and jvm_errors.is_(found, Kind.INGEST_REFUSED) and found.origin is not None:
            # A query's rows refused while it ran (StreamIngest.Refused, thrown by commit itself).
            kind, value = str(found.origin.kind()), str(found.origin.value())
            if kind == "change_type":
                line = f"INSERT into {name} refused: a row has a _change_type outside {ALLOWED}: {value}"
                return InvalidChangeTypeError(f"{line.rstrip(' .')}. Nothing was written")
            return NullKeyError(
                f"INSERT into {name} refused: a row has a NULL key column ({', '.join(spec.primary_key)}); "
                "key columns must not be NULL. Nothing was written")
        if jvm_errors.is_(found, Kind.COMMIT_STATE_UNKNOWN):
            return WriteOutcomeUnknownError(
                f"INSERT into {name}: the metastore did not confirm the commit, so it may or may not have "
                f"landed; send it again with the same {REQUEST_ID} to be sure it lands exactly once")
        return e

    def counters(self) -> dict[str, int]:
        return json.loads(str(self._ingest().counters()))
