"""Fresh views: ``<db><suffix>.<table>`` reads the lake table plus the changes
committed to the stream table after the lake's tiered position, merged by the
round's rule (``sql/templates/fresh_view.sql.j2``; docs/tiering.md, "Fresh
views").

The view is plain SQL with literals: the lake snapshot it reads and the
position after which it reads the stream. Both are taken from one lake
snapshot (its ``tiering.source-position``), and the view is re-created after
the round's last lake commit (:func:`after_lake_commit`, called by the
round), by the process's re-pin thread (:class:`Repinner`) rather than the
round: a re-pin is a view commit and a metastore update (~0.3 s), and every
pin is as exact as the newest, only reading more of the stream, so the
round reports its table finished without waiting for it. Re-pins of one
table are serialised (:func:`_pin_lock`) and each reads the lake as it is
when it runs, so a later re-pin never pins further back than an earlier
one, and pending re-pins of a table coalesce into one. Across processes (a
tiering service and the server re-pin the same views) the pin is a
compare-and-set on the view's metastore entry (:func:`_create_view`,
:func:`sync_metastore_text`; made under Hive's lock on the view where the
metastore is not the embedded one, whose ``alter_table`` checks it itself): no pin older than the one in force is ever
written, so maintenance that re-pinned and then removed what older pins read
(lake and stream snapshot expiry, log retention) cannot be undone by a late
re-pin. Spark
resolves the view by its metastore text, which one metastore update replaces
(:func:`sync_metastore_text`), so a query resolves either the old pair or the
new one; each pair alone counts every committed change
exactly once, whenever the query runs. A view that missed a refresh (a failed
hook) is still right, only slower: its stream part starts further back.

The stream part is an incremental read, ``tierlake_inc.<db>.<table>.after_<P>``
(server/changelog/java/IncrementalCatalog.java): only the files the appends
after the stream snapshot ``P`` at the position added, so its cost follows
what is not tiered yet. It needs ``P`` and every snapshot after it: stream
snapshot expiry re-pins the view first (server/maintenance/tables.py).
Where there is no such ``P`` (nothing tiered yet, the snapshot expired) or the
session lacks the catalog, the view scans every stream file and keeps those
committed after the position (the same rows, at a cost that follows the
stream's live files). Where the snapshots after ``P`` are expired after the
view was pinned (a user's ``expire_snapshots``; a table in ``Failed`` is not
re-pinned by rounds), the catalog itself falls back to that full scan and
names it in the plan.

When the pending files hold few rows (``tierlake.fresh.local-merge-rows``) the
view's other form answers instead: ``tierlake_inc.<db>.<table>.winners_after_…``
(``pending_after_…`` for a log table, :func:`merged_name`), the pending changes
merged in the driver while the query is planned and handed to Spark as a local
relation by an optimizer rule (server/changelog/java/FreshMerge.java), which
empties whichever form does not answer. A query then runs no stream job, and
with nothing pending its plan is the lake query's.

The stream table names its view in the internal property
``tierlake.fresh-view``, so a round (in the server or a tiering service) finds
it without the server's settings.
"""

from __future__ import annotations

import getpass
import logging
import re
import socket
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from tierlake import sql
from tierlake.server.catalog import field_ids
from tierlake.server.catalog.columns import schema_columns
from tierlake.server.catalog.properties import FRESH_VIEW_PROPERTY
from tierlake.server.catalog.spec import CHANGE_TYPE, TieredSpec
from tierlake.server.catalog.table_path import TablePath, load_table
from tierlake.server.catalog.tiered_tables import suffixed_path
from tierlake.server.changelog.handle import TableHandle
from tierlake.server.changelog.jvm import INCREMENTAL_CATALOG_NAME
from tierlake.server.changelog.planner import lake_position
from tierlake.server.changelog.positions import snapshot_at
from tierlake.server.config.config import Config
from tierlake.server.exceptions import ConcurrentUpdateError
from tierlake.server.runtime.jvm import jclass, string_map
from tierlake.server.runtime.jvm_errors import Kind, is_
from tierlake.server.runtime.session import activate, private_session

log = logging.getLogger("tierlake.fresh")

T_FRESH_VIEW = "templates/fresh_view.sql.j2"
T_CREATE_DATABASE = "templates/create_database.sql.j2"
T_DROP_VIEW = "templates/drop_view.sql.j2"
COMMENT = "tierlake fresh view of {stream}: {lake} at snapshot {snapshot} + stream changes after position {position}"
# The metastore parameter that holds the pin of the view's text plus a nonce: each re-pin's
# metastore update expects the value it read before it read the lake (a compare-and-set).
# Not a dotted name: it is a metastore parameter, not a tierlake setting or table property.
PIN_PARAMETER = "tierlake_fresh_pin"
_PIN_TEXT = re.compile(r"/\* tierlake-pin (\d+):(\d+):(-?\d+)(?::([0-9a-f]+))? \*/")
REPIN_ATTEMPTS = 5


@dataclass(frozen=True, order=True)
class Pin:
    """What a view's text pins, ordered as the lake moves: the lake snapshot's sequence number,
    then the stream position it covers (a compaction's ``replace`` keeps the position)."""

    lake_sequence: int
    position: int
    lake_snapshot: int = field(compare=False)  # -1: the lake had no snapshot
    # The stream schema the text names columns of (:func:`schema_key`; "": not recorded).
    stream_schema: str = field(compare=False, default="")

    def text(self) -> str:
        key = f":{self.stream_schema}" if self.stream_schema else ""
        return f"{self.lake_sequence}:{self.position}:{self.lake_snapshot}{key}"


def pin_of(text: str | None) -> Pin | None:
    """The pin written into a view's text (``/* tierlake-pin … */``, fresh_view.sql.j2); None: none."""
    found = _PIN_TEXT.search(text or "")
    return None if found is None else Pin(int(found.group(1)), int(found.group(2)), int(found.group(3)),
                                          found.group(4) or "")


def schema_key(stream_table: Any) -> str:
    """The stream's schema (names, ids, types) as a short key: a view whose text names other stream
    columns than the stream has now (a RENAME COLUMN on an idle table) is re-pinned by the server's
    periodic check (:func:`repin_if_schema_changed`). Not the schema id: Iceberg reuses ids."""
    return format(zlib.crc32(str(stream_table.schema().asStruct().toString()).encode()), "08x")


def repin_if_schema_changed(handle: TableHandle) -> bool:
    """Re-pin the stream's fresh view if its text was made for another stream schema; whether it did.

    The view names the stream's columns, so after a RENAME COLUMN it fails until it is re-pinned; a
    round re-pins it (an idle table's too), but a table in ``Failed`` has no rounds, and an idle one
    only within its freshness interval. The server's KV maintenance calls this for every registered
    table (server/maintenance/kv_tables.py): one metastore read when nothing changed."""
    view = _view_named(handle.properties)
    pin = None if view is None else current_pin(handle.spark, view)
    if pin is None or not pin.stream_schema:
        return False
    if pin.stream_schema == schema_key(handle.stream_table):
        return False
    refresh(handle)
    log.info("fresh view %s re-pinned: the stream's columns changed", view)
    return True


def fresh_path(config: Config | None, stream: TablePath) -> TablePath:
    """``<db><tierlake.fresh.database-suffix>.<table>``."""
    return suffixed_path(config, stream, "tierlake.fresh.database-suffix")


def _properties(spark: Any, stream: TablePath) -> dict[str, str]:
    return _table_properties(load_table(spark, stream))


def _table_properties(table: Any) -> dict[str, str]:
    return string_map(table.properties())


def view_of(spark: Any, stream: TablePath, properties: dict[str, str] | None = None) -> TablePath | None:
    """The fresh view the stream table names, if any (``properties``: the table's, when already read)."""
    return _view_named(_properties(spark, stream) if properties is None else properties)


def _view_named(properties: dict[str, str]) -> TablePath | None:
    name = properties.get(FRESH_VIEW_PROPERTY)
    return TablePath(*str(name).split(".", 1)) if name else None


def incremental_start(stream_table: Any, position: int) -> int | None:
    """The stream snapshot at ``position`` if an incremental read can start after it: the
    current snapshot reaches it through parents that were not expired. None otherwise."""
    snapshot = snapshot_at(stream_table, position) if position > 0 else None
    return None if snapshot is None else int(snapshot.snapshotId())


def has_incremental_catalog(spark: Any) -> bool:
    """This session resolves ``tierlake_inc`` (every tierlake session does: runtime/session.py)."""
    return bool(spark.conf.get(f"spark.sql.catalog.{INCREMENTAL_CATALOG_NAME}", None))


def render(handle: TableHandle, view: TablePath, incremental: bool = True) -> str:
    """The ``CREATE OR REPLACE VIEW`` statement pinned to the lake's current snapshot (see :func:`pinned`)."""
    return pinned(handle, view, incremental)[0]


def pinned(handle: TableHandle, view: TablePath, incremental: bool = True) -> tuple[str, int]:
    """The ``CREATE OR REPLACE VIEW`` statement pinned to the lake's current snapshot, and the
    stream position it reads after (see :func:`_statement`)."""
    statement, pin = _statement(handle, view, incremental)
    return statement, pin.position


def _statement(handle: TableHandle, view: TablePath, incremental: bool = True) -> tuple[str, Pin]:
    """The ``CREATE OR REPLACE VIEW`` statement pinned to the lake's current snapshot, and its pin.

    ``incremental``: read the stream after the snapshot at the position when
    there is one (else, or with False, scan every stream file). The handle's
    tables are used as they are (the caller refreshed them)."""
    spark, stream, lake = handle.spark, handle.stream, handle.lake
    stream_table, lake_table, props = handle.stream_table, handle.lake_table, handle.properties
    stream_columns_now = schema_columns(spark, stream_table.schema())
    spec = TieredSpec.from_properties(props, stream_columns_now)
    snapshot = lake_table.currentSnapshot()
    snapshot_id = None if snapshot is None else int(snapshot.snapshotId())
    position = lake_position(lake_table)[0] if snapshot is not None else 0
    start = incremental_start(stream_table, position) if incremental else None
    # The lake's columns, read at that snapshot's schema (what a read of the
    # snapshot sees: Iceberg's schemaFor), named as the lake names them now
    # (a rename after the snapshot); the stream column carrying each is found
    # by field id (the lake's recorded mapping), else by name. So a rename on
    # an idle table (no new snapshot) reads right at once (docs/tiering.md).
    schema = lake_table.schema() if snapshot_id is None else \
        jclass("org.apache.iceberg.util.SnapshotUtil", spark.sparkContext._jvm).schemaFor(lake_table, snapshot_id)
    columns = schema_columns(spark, schema)
    lake_absent = [False] * len(columns)
    if snapshot_id is not None:
        # Columns the lake gained after the snapshot (ADD COLUMN on an idle table): NULL for the
        # lake's rows, the stream's values for pending ones.
        pinned_ids = {int(f.fieldId()) for f in schema.columns()}
        for c in schema_columns(spark, lake_table.schema()):
            if int(lake_table.schema().findField(c.name).fieldId()) not in pinned_ids:
                columns.append(c)
                lake_absent.append(True)
    out_names, stream_columns = _carried(stream_table, lake_table, schema, columns, stream_columns_now)
    lake_keys, out_keys = [], []
    for key in spec.primary_key:
        at = next((i for i, s in enumerate(stream_columns) if s and s.lower() == key.lower()), None)
        lake_keys.append(key if at is None else columns[at].name)
        out_keys.append(key if at is None else out_names[at])
    comment = COMMENT.format(stream=stream, lake=lake, snapshot=snapshot_id, position=position)
    if start is None:
        comment += " (full scan of the stream: no snapshot to read incrementally after)"
    pin = Pin(0 if snapshot is None else int(snapshot.sequenceNumber()), position,
              -1 if snapshot_id is None else snapshot_id, schema_key(stream_table))
    after = None if start is None else [INCREMENTAL_CATALOG_NAME, stream.database, stream.table, f"after_{start}"]
    entries = [stream.database, stream.table, "entries"] if after is None else \
        [INCREMENTAL_CATALOG_NAME, stream.database, stream.table, f"entries_after_{start}_at_{position}"]
    merged = None if after is None else \
        [INCREMENTAL_CATALOG_NAME, stream.database, stream.table, merged_name(stream_table, spec, start, position)]
    return (sql.render_checked(
        T_FRESH_VIEW, view=[view.database, view.table], lake=[lake.database, lake.table],
        stream=[stream.database, stream.table], stream_after=after, entries=entries, merged=merged,
        columns=columns, stream_columns=stream_columns, out_names=out_names, lake_absent=lake_absent,
        lake_keys=lake_keys,
        out_keys=out_keys, keys=spec.primary_key, sequence_by=spec.sequence_by,
        change_type=CHANGE_TYPE, lake_snapshot=snapshot_id, position=position, comment=comment,
        pin=pin.text()), pin)


def merged_name(stream_table: Any, spec: TieredSpec, start: int, position: int) -> str:
    """The name of the view's pending changes merged in the driver (server/changelog/java/FreshMerge.java):
    ``pending_after_<id>_at_<pos>`` for a log table; for a primary-key table
    ``winners_after_<id>_at_<pos>_keys_<ids>_seq_<id|none>_change_<id|none>``, the key, sequence-by
    and change-type columns by Iceberg field id (a rename of one does not change what it names)."""
    if not spec.primary_key:
        return f"pending_after_{start}_at_{position}"
    schema = stream_table.schema()

    def field_id(name: str | None) -> str:
        found = None if name is None else schema.caseInsensitiveFindField(name)
        return "none" if found is None else str(int(found.fieldId()))

    keys = "".join(f"_{field_id(k)}" for k in spec.primary_key)
    return f"winners_after_{start}_at_{position}_keys{keys}_seq_{field_id(spec.sequence_by)}" \
        f"_change_{field_id(CHANGE_TYPE)}"


def sync_metastore_text(spark: Any, view: TablePath, expected: Any = True) -> Pin | None | bool:
    """Write the view's current SQL into its Hive metastore entry.

    ``CREATE OR REPLACE VIEW`` in ``spark_catalog`` makes an Iceberg view
    (SparkSessionCatalog is a view catalog), and Iceberg's Hive view
    operations write the SQL into the metastore's view text only when they
    create the view; a replace commits new Iceberg metadata and leaves the
    old text. Spark 3.5 resolves a session-catalog view by that text, so
    without this every query would keep reading the view's first version.
    One metastore update: a query resolves the old text or the new one.

    The text a query resolves is what the view pins, so this update is where
    pins are kept monotonic across processes (a tiering service and the server
    re-pin the same view): it writes :data:`PIN_PARAMETER` with the text and,
    given ``expected`` (the parameter's value the caller read before it read
    the lake; None: the entry had none), lands only if the parameter still has
    that value, and never writes a text whose pin is older than the entry's.
    Returns the pin now in force, False when it did not write (the caller
    reads the lake again and re-pins); ``expected=True``: no compare-and-set
    (the view's first version).

    The update sends the whole entry back, Iceberg's ``metadata_location``
    included, as it was read: a replace of the view landing between the read
    and the write would be undone (the entry naming an older Iceberg version
    whose text pins further back than what maintenance just re-pinned and
    then expired behind). How the read-modify-write is made atomic depends on
    who runs ``alter_table``:

    - the embedded metastore (this JVM only): its compare-and-set
      (server/metastore/java/CasAlterHandler.java) refuses a write whose
      expected parameter moved, or made from a copy another replace overtook;
      no lock, no extra round trip;
    - a metastore service or a shared database (Hive 2.3's own
      ``alter_table``, which ignores expected parameters): the read, the
      checks and the write run under Hive's EXCLUSIVE lock on the view
      (:func:`_lock_view`), the lock Iceberg's view commits take themselves
      (HiveViewOperations, ``iceberg.engine.hive.lock-enabled``). Every writer
      of the entry — Iceberg's replace, any process's re-pin — then waits for
      the others, so what is read is what is overwritten. Checking after the
      write instead cannot repair it: the write has already replaced the newer
      ``metadata_location``, which nothing names any more, and the other
      process may have acted on its pin meanwhile (expired what the older pin
      reads); only excluding Iceberg's own commits closes the window."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    namespace = gateway.new_array(jclass("java.lang.String", jvm), 1)
    namespace[0] = view.database
    catalog = spark._jsparkSession.sessionState().catalogManager().catalog("spark_catalog")
    identifier = jclass("org.apache.spark.sql.connector.catalog.Identifier", jvm).of(namespace, view.table)
    locking = _views_locked(spark)

    def write(client: Any, lock: int | None) -> Pin | None | bool:
        for attempt in range(3):
            table = client.getTable(view.database, view.table)
            text = catalog.loadView(identifier).query()
            params = table.getParameters()
            value = None if params is None else params.get(PIN_PARAMETER)
            if expected is not True and value != expected:
                return False  # another re-pin landed since the caller read the pin
            now, new = pin_of(table.getViewOriginalText()), pin_of(text)
            if now is not None and (new is None or new < now):
                return False  # Iceberg's current version is older than the text in force: never back
            if table.getViewExpandedText() == text and table.getViewOriginalText() == text:
                return new
            table.setViewOriginalText(text)
            table.setViewExpandedText(text)
            if new is not None:
                table.putToParameters(PIN_PARAMETER, f"{new.text()}:{uuid.uuid4().hex[:12]}")
            if lock is not None:
                # Still ours, and fresh for the write: raises if it is gone. Hive times a lock out
                # after hive.txn.timeout without a heartbeat, and Iceberg's MetastoreLock, waiting
                # on a Hive 2 metastore, releases a lock whose last heartbeat is older than 60 s
                # (iceberg.hive.lock-heartbeat-interval-ms); Iceberg checks its own lock here too.
                client.heartbeat(0, lock)
            try:
                if value is None:
                    client.alter_table(view.database, view.table, table)
                else:
                    context = jclass("org.apache.hadoop.hive.metastore.api.EnvironmentContext", jvm)()
                    context.putToProperties("expected_parameter_key", PIN_PARAMETER)
                    context.putToProperties("expected_parameter_value", value)
                    client.alter_table_with_environmentContext(view.database, view.table, table, context)
                return new
            except Exception as e:
                if is_(e, Kind.METASTORE_MODIFIED):
                    return False  # the compare-and-set lost: another re-pin landed in between
                # The embedded metastore refuses an alter made from a copy that another replace
                # of the view overtook (CasAlterHandler.java): read the view and its text again.
                if not is_(e, Kind.STALE_COPY) or attempt == 2:
                    raise
        return False

    def update(client: Any) -> Pin | None | bool:
        lock = _lock_view(spark, client, view)
        try:
            return write(client, lock)
        finally:
            _unlock_view(spark, client, view, lock)

    if not locking:
        return _with_metastore(spark, lambda client: write(client, None))
    return _with_metastore(spark, update, waits=True)


# How long a re-pin waits for Hive's lock on its view (Iceberg's own view commits hold it for the
# length of one metastore update; Iceberg waits up to 3 minutes for it by default).
VIEW_LOCK_TIMEOUT_S = 60.0
_views_locked_cache: list[tuple[Any, bool]] = []  # (jvm, whether spark_catalog's view commits lock)


def _views_locked(spark: Any) -> bool:
    """Whether ``spark_catalog``'s Iceberg view commits take Hive's metastore lock
    (``iceberg.engine.hive.lock-enabled``, default true; the catalog's own ``hadoop.`` override
    first): a metastore service or a shared database. False with the embedded metastore, whose
    ``alter_table`` is a compare-and-set instead (server/runtime/session.py)."""
    jvm = spark.sparkContext._jvm
    if _views_locked_cache and _views_locked_cache[0][0] is jvm:
        return _views_locked_cache[0][1]
    value = spark.conf.get("spark.sql.catalog.spark_catalog.hadoop.iceberg.engine.hive.lock-enabled", None) \
        or spark._jsc.hadoopConfiguration().get("iceberg.engine.hive.lock-enabled")
    locked = str(value or "true").strip().lower() != "false"
    _views_locked_cache[:] = [(jvm, locked)]
    return locked


def _lock_view(spark: Any, client: Any, view: TablePath) -> int:
    """Hive's EXCLUSIVE table lock on the view's entry, as Iceberg's MetastoreLock requests it
    (so one excludes the other); its id once acquired. Raises ConcurrentUpdateError when it is
    not acquired in :data:`VIEW_LOCK_TIMEOUT_S` (the pin in force stays)."""
    jvm = spark.sparkContext._jvm
    api = "org.apache.hadoop.hive.metastore.api."
    # Named as the view's CREATE OR REPLACE names it, so as Iceberg's lock is (Hive 2.3 compares the
    # names as given; a TablePath is in lower case, as the metastore keeps names).
    component = jclass(api + "LockComponent", jvm)(
        jclass(api + "LockType", jvm).EXCLUSIVE, jclass(api + "LockLevel", jvm).TABLE, view.database)
    component.setTablename(view.table)
    components = jclass("java.util.ArrayList", jvm)()
    components.add(component)
    request = jclass(api + "LockRequest", jvm)(components, _user(), socket.gethostname())
    agent = f"tierlake-fresh-view-{uuid.uuid4()}"
    request.setAgentInfo(agent)
    try:
        response = client.lock(request)
    except Exception:
        # The request may have been taken before the answer was lost: release it, else it would
        # hold the view's commits back until Hive times it out.
        _release_agent(spark, view, agent)
        raise
    lock = int(response.getLockid())
    deadline, pause = time.monotonic() + VIEW_LOCK_TIMEOUT_S, 0.05
    try:
        while str(response.getState()) != "ACQUIRED":
            if str(response.getState()) != "WAITING":
                raise ConcurrentUpdateError(f"the metastore lock on the fresh view {view} ended "
                                            f"{response.getState()}; its pin in force stays")
            if time.monotonic() > deadline:
                raise ConcurrentUpdateError(f"the metastore lock on the fresh view {view} was not granted in "
                                            f"{VIEW_LOCK_TIMEOUT_S:.0f} s; its pin in force stays")
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)
            response = client.checkLock(lock)
    except BaseException:
        _unlock_view(spark, client, view, lock)
        raise
    return lock


def _user() -> str:
    try:
        return getpass.getuser() or "tierlake"
    except (KeyError, OSError):  # no login name in the environment nor the password database
        return "tierlake"


def _unlock_view(spark: Any, client: Any, view: TablePath, lock: int) -> None:
    """Release the lock; through a new client when this one fails (a lock left behind would hold
    the view's commits back until Hive times it out)."""
    try:
        client.unlock(lock)
        return
    except Exception:  # tried again below
        log.warning("could not release the metastore lock %s on %s; trying a new client", lock, view, exc_info=True)
    try:
        other = _new_client(spark)
        try:
            other.unlock(lock)
        finally:
            other.close()
    except Exception:  # Hive times it out (hive.txn.timeout)
        log.warning("could not release the metastore lock %s on %s", lock, view, exc_info=True)


def _release_agent(spark: Any, view: TablePath, agent: str) -> None:
    """Release every lock on the view requested as ``agent`` (a lock request whose answer was lost)."""
    try:
        other = _new_client(spark)
        try:
            request = jclass("org.apache.hadoop.hive.metastore.api.ShowLocksRequest", spark.sparkContext._jvm)()
            request.setDbname(view.database)
            request.setTablename(view.table)
            for element in other.showLocks(request).getLocks():
                if str(element.getAgentInfo()) == agent:
                    other.unlock(element.getLockid())
        finally:
            other.close()
    except Exception:  # Hive times it out (hive.txn.timeout)
        log.warning("could not look for a lock on %s requested as %s", view, agent, exc_info=True)


def _pin_state(spark: Any, view: TablePath) -> tuple[bool, str | None, Pin | None]:
    """The view's metastore entry as a re-pin starts: (it exists, its pin parameter, the pin of its text)."""
    def read(client: Any) -> tuple[bool, str | None, Pin | None]:
        try:
            table = client.getTable(view.database, view.table)
        except Exception as e:
            if is_(e, Kind.NO_SUCH_OBJECT):
                return False, None, None
            raise
        params = table.getParameters()
        return True, None if params is None else params.get(PIN_PARAMETER), pin_of(table.getViewOriginalText())

    return _with_metastore(spark, read)


def current_pin(spark: Any, view: TablePath) -> Pin | None:
    """What the view's text in force pins (None: no view, or one made before pins were written)."""
    return _pin_state(spark, view)[2]


def pinned_lake_snapshot(handle: TableHandle) -> int | None:
    """The lake snapshot the stream's fresh view reads now (None: no view, or its pin is unknown):
    lake snapshot expiry keeps it (server/maintenance/tables.py)."""
    view = _view_named(handle.current_properties())
    pin = None if view is None else current_pin(handle.spark, view)
    return None if pin is None or pin.lake_snapshot < 0 else pin.lake_snapshot


_metastore_lock = threading.Lock()
_metastore: list[tuple[Any, Any]] = []  # (jvm, client): the process's client, made on first use
# The re-pins' updates under a metastore lock (a metastore service or a shared database), which may
# wait for another writer's lock on the view: a client and a turn of their own, so that the process's
# reads of pins (current_pin, maintenance's pinned_lake_snapshot) never wait behind them.
_locking_metastore_lock = threading.Lock()
_locking_metastore: list[tuple[Any, Any]] = []


def _with_metastore(spark: Any, use: Any, waits: bool = False) -> Any:
    """``use(client)`` with the process's Hive metastore client, one at a time: an embedded
    metastore's client builds its own handler, which cost a large part of every re-pin when
    made per call. A client that fails is closed and made again once. ``waits``: the use may
    wait for a metastore lock (another client, another turn)."""
    jvm = spark.sparkContext._jvm
    turn, held = (_locking_metastore_lock, _locking_metastore) if waits else (_metastore_lock, _metastore)
    with turn:
        for attempt in (0, 1):
            if not held or held[0][0] is not jvm:
                held[:] = [(jvm, _new_client(spark))]
            client = held[0][1]
            try:
                return use(client)
            except ConcurrentUpdateError:
                raise  # not the client's failure (a lock not granted in time): no second wait
            except Exception:
                held.clear()
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - already broken
                    pass
                if attempt:
                    raise
    return None


def _new_client(spark: Any) -> Any:
    jvm = spark.sparkContext._jvm
    hive_conf_class = jclass("org.apache.hadoop.hive.conf.HiveConf", jvm)
    hive_conf = jclass("java.lang.Class", jvm).forName("org.apache.hadoop.hive.conf.HiveConf")
    return jclass("org.apache.hadoop.hive.metastore.HiveMetaStoreClient", jvm)(
        hive_conf_class(spark._jsc.hadoopConfiguration(), hive_conf))


def _carried(stream_table: Any, lake_table: Any, schema: Any, columns: list, stream_now: list) -> tuple[list, list]:
    """Per lake column (of ``schema``, the pinned snapshot's): its name in the lake now, and the stream
    column carrying it now (None: none does)."""
    recorded = field_ids.decode(field_ids.read_text(lake_table)) or {}
    by_lake_name = {str(name).lower(): int(fid) for fid, name in recorded.items()}
    stream_names = {c.name.lower(): c.name for c in stream_now if c.name.lower() != CHANGE_TYPE}
    current, stream_schema = lake_table.schema(), stream_table.schema()
    out_names, carried = [], []
    for c in columns:
        field = schema.findField(c.name) or current.findField(c.name)
        now = current.findField(field.fieldId()) if field is not None else None
        name = str(now.name()) if now is not None else c.name
        out_names.append(name)
        fid = by_lake_name.get(name.lower())
        source = stream_schema.findField(fid) if fid is not None else None
        if source is not None and str(source.name()).lower() != CHANGE_TYPE:
            carried.append(str(source.name()))
        else:
            carried.append(stream_names.get(name.lower()))
    return out_names, carried


# Both tables' schemas (as field ids, names and types) each view of this process was last created
# with: an idle table's round re-pins its view when either changed (a column renamed, added or
# dropped). Not schema ids: Iceberg gives a schema equal to an earlier one that one's id again, so
# dropping a column just added brings back the id the view may have been pinned with.
_PINNED_SCHEMAS: dict[str, tuple[str, str]] = {}


def _schemas_of(stream_table: Any, lake_table: Any) -> tuple[str, str]:
    return str(stream_table.schema().asStruct().toString()), str(lake_table.schema().asStruct().toString())


def schema_changed(handle: TableHandle) -> bool:
    """Whether the fresh view of a round's table was made with other schemas than it has now
    (or not by this process): an idle table's round re-pins it then."""
    name = handle.properties.get(FRESH_VIEW_PROPERTY)
    if not name:
        return False
    return _PINNED_SCHEMAS.get(str(name).lower()) != _schemas_of(handle.stream_table, handle.lake_table)


def _create_view(handle: TableHandle, view: TablePath) -> int:
    """(Re-)create ``view``: incremental when the session can; the full scan if that fails
    (the view's rows are the same either way, only its cost differs). Returns the position
    the view in force reads the stream after.

    Never moves the view back, whichever process re-pins it: the pin in force
    is read before the lake, a pin older than it is not written, and the
    metastore update is a compare-and-set on it (:func:`sync_metastore_text`);
    when another re-pin landed in between, the lake is read again. So a
    re-pin computed from an older lake read cannot land after a maintenance
    action that re-pinned and then removed what the older pin reads.

    The view's text and the schemas recorded for it come from the handle's tables."""
    spark, stream, lake = handle.spark, handle.stream, handle.lake
    for attempt in range(REPIN_ATTEMPTS):
        if attempt:
            handle.fresh_lake()
            handle.fresh_stream()
        exists, expected, before = _pin_state(spark, view)
        statement = None
        pin = None
        if has_incremental_catalog(spark):
            try:
                statement, pin = _statement(handle, view)
                if before is not None and pin < before:
                    return _kept(view, before, pin)
                spark.sql(statement)
            except Exception:  # retried with the full scan below
                log.warning("could not create %s with an incremental read of %s; scanning it in full", view, stream,
                            exc_info=True)
                statement = None
        if statement is None:
            statement, pin = _statement(handle, view, incremental=False)
            if before is not None and pin < before:
                return _kept(view, before, pin)
            spark.sql(statement)
        written = sync_metastore_text(spark, view, expected if exists else True)
        if written is False:
            log.info("%s was re-pinned by another process meanwhile; reading %s again", view, lake)
            continue
        try:
            _PINNED_SCHEMAS[str(view).lower()] = _schemas_of(handle.stream_table, handle.lake_table)
        except Exception:  # noqa: BLE001 - only an idle round's re-pin check reads it
            pass
        return pin.position if written is None else written.position
    raise ConcurrentUpdateError(f"the fresh view {view} was re-pinned by others {REPIN_ATTEMPTS} times "
                                "while this re-pin ran; its pin in force stays")


def _kept(view: TablePath, before: Pin, pin: Pin) -> int:
    log.info("%s keeps its pin %s: this re-pin read the lake before it (%s); pins only move forward",
             view, before.text(), pin.text())
    return before.position


def create(spark: Any, config: Config | None, stream: TablePath, lake: TablePath,
           handle: TableHandle | None = None) -> TablePath:
    """Create (or re-create) the fresh view of a tiered table and record it on the stream table.
    ``handle``: the table's, when the caller has it (its loaded tables are read, not loaded again)."""
    view = fresh_path(config, stream)
    spark.sql(sql.render(T_CREATE_DATABASE, database=view.database))
    if handle is None:
        handle = TableHandle(spark, stream, lake, config)
    with _pin_lock(stream):
        _create_view(handle, view)
    if handle.current_properties().get(FRESH_VIEW_PROPERTY) != str(view):
        handle.stream_table.updateProperties().set(FRESH_VIEW_PROPERTY, str(view)).commit()
    log.info("fresh view %s of %s created", view, stream)
    return view


_pin_locks: dict[str, threading.Lock] = {}
_pin_locks_guard = threading.Lock()


def _pin_lock(stream: TablePath) -> threading.Lock:
    """Serialises this process's re-pins and drops of one table's view: the
    one that runs later reads the lake later, so it never pins further back."""
    with _pin_locks_guard:
        return _pin_locks.setdefault(str(stream).lower(), threading.Lock())


def refresh(handle: TableHandle) -> int | None:
    """Re-pin the stream's fresh view (if it has one) to the lake's current snapshot, now;
    returns the stream position it now reads after (None: no view).

    The handle's tables are refreshed here: the view property as it is now (a
    view dropped meanwhile is not brought back), the lake's newest commit."""
    activate(handle.spark)  # resolved through this thread's active session (the re-pin thread has none)
    with _pin_lock(handle.stream):
        view = _view_named(handle.current_properties())
        if view is None:
            return None
        handle.fresh_lake()
        return _create_view(handle, view)


def after_lake_commit(handle: TableHandle) -> None:
    """The round's hook after its last lake commit: the view re-pinned by the
    re-pin thread, soon. Never fails the round (the old view stays correct,
    it only reads more of the stream; stream snapshot expiry re-pins it
    before it could remove what the old view reads)."""
    try:
        repinner(handle.spark).schedule(handle)
    except Exception:  # see the docstring
        log.warning("could not schedule the re-pin of the fresh view of %s", handle.stream, exc_info=True)


class Repinner:
    """A process's thread that re-pins fresh views after rounds (see the module docstring).

    Pending re-pins are kept per table, the newest request replacing an older
    one (each reads the lake when it runs). A re-pin uses the round's handle,
    refreshed: the round has ended with it (the round thread schedules the
    re-pin as its last use of the handle; the next round opens its own)."""

    def __init__(self, spark: Any):
        self.spark = spark
        self.context = getattr(spark, "sparkContext", spark)  # what repinner() keys this thread by
        self.cond = threading.Condition()
        self.pending: dict[str, TableHandle] = {}
        self.running: str | None = None
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="tierlake-fresh-repin", daemon=True)
        self.thread.start()

    def schedule(self, handle: TableHandle) -> None:
        with self.cond:
            if self.stopping:
                return
            self.pending[str(handle.stream).lower()] = handle
            self.cond.notify_all()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending and not self.stopping:
                    self.cond.wait()
                if not self.pending:
                    return
                key = next(iter(self.pending))
                handle = self.pending.pop(key)
                self.running = key
            try:
                # The round's tables in this thread's session: the round thread's own session goes on to
                # its next round (settings such as the bucketed MERGE's would be captured by the view).
                refresh(handle.in_session(self.spark))
            except Exception:  # the old pin stays, exact; the next round tries again
                log.warning("could not refresh the fresh view of %s", handle.stream, exc_info=True)
            finally:
                with self.cond:
                    self.running = None
                    self.cond.notify_all()

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait until every re-pin scheduled so far ran; False on timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.pending or self.running is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not self.thread.is_alive():
                    return False
                self.cond.wait(left)
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """Run what is pending (bounded by ``timeout``), then end the thread."""
        self.settle(timeout)
        with self.cond:
            self.stopping = True
            self.pending.clear()
            self.cond.notify_all()
        self.thread.join(timeout=timeout)


_repinner: Repinner | None = None
_repinner_guard = threading.Lock()


def repinner(spark: Any) -> Repinner:
    """The re-pin thread of this process's Spark (one per SparkContext, whichever of its sessions asks).

    Keyed by the session, every round thread's session (tierlake.tiering.tables-per-job of them per
    job) made a new thread when it followed another's, and the old one waited forever: 20 threads after
    10 alternations. The thread re-pins in a session of its own, cloned once from the first asker's:
    a round thread's session goes on to its next round with settings a view would capture. A new
    SparkContext (tests restart Spark) gets a new thread and the old one ends."""
    global _repinner
    context = getattr(spark, "sparkContext", spark)
    with _repinner_guard:
        if _repinner is None or _repinner.context is not context or _repinner.stopping:
            old = _repinner
            _repinner = Repinner(private_session(spark) if hasattr(spark, "_jsparkSession") else spark)
            _repinner.context = context
            if old is not None and not old.stopping:
                old.stop(timeout=0)
        return _repinner


def settle(timeout: float = 60.0) -> bool:
    """Every fresh-view re-pin scheduled in this process so far has run (tests, benchmarks)."""
    current = _repinner
    return True if current is None else current.settle(timeout)


def stop_repins(timeout: float = 30.0) -> None:
    """At shutdown, before Spark stops: pending re-pins run, then the thread ends."""
    global _repinner
    with _repinner_guard:
        current, _repinner = _repinner, None
    if current is not None:
        current.stop(timeout)


def drop(spark: Any, config: Config | None, stream: TablePath) -> TablePath | None:
    """Drop the fresh view of ``stream`` (named by its property, else by the setting) and forget it."""
    try:
        view = view_of(spark, stream)
        has_table = True
    except Exception:  # noqa: BLE001 - the stream table is gone already (DROP TABLE)
        view, has_table = None, False
    view = view or fresh_path(config, stream)
    with _pin_lock(stream):  # a re-pin in flight would bring the view back
        drop_view(spark, view)
        if has_table:
            stream_table = load_table(spark, stream)
            if FRESH_VIEW_PROPERTY in _table_properties(stream_table):
                stream_table.updateProperties().remove(FRESH_VIEW_PROPERTY).commit()
    log.info("fresh view %s of %s dropped", view, stream)
    return view


def drop_view(spark: Any, view: TablePath) -> None:
    spark.sql(sql.render(T_DROP_VIEW, view=[view.database, view.table]))
    _PINNED_SCHEMAS.pop(str(view).lower(), None)  # bounded by the views that exist
