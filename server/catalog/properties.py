"""Every table property and commit property tierlake reads or writes, in one
registry (pyiceberg's ``TableProperties`` style).

Modules import the key constants from here, so each key is spelled once. A
property either belongs to users (set in ``CREATE TABLE … TBLPROPERTIES`` or
``ALTER TABLE … SET TBLPROPERTIES``) or is ``internal`` bookkeeping tierlake
sets itself; ``table`` says which table carries it (the stream table, its
lake table or its KV table). Some defaults are a server setting or another
property: :func:`read` resolves them. docs/configuration.md renders both
tables (``python -m tierlake.server.config_docs --write``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tierlake.server.catalog.transforms import parse_transform, split_transforms
from tierlake.server.config import settings, values
from tierlake.server.exceptions import InvalidArgumentError

# ---- user-facing properties of a stream table -------------------------------
ENABLED = "table.datalake.enabled"
PRIMARY_KEY = "primary-key"
BUCKETS = "bucket.num"
SEQUENCE_BY = "sequence-by"
FRESHNESS_PROPERTY = "table.datalake.freshness"
LAKE_PARTITION = "table.datalake.partition"
MAX_ROUND = "table.datalake.tiering.max-round-duration"
CHUNK_ROWS = "table.datalake.tiering.chunk-rows"
QUALITY = "table.datalake.quality"
LOG_TTL = "table.log.ttl"
SNAPSHOT_INTERVAL = "kv.snapshot.interval"
NUM_RETAINED = "kv.snapshot.num-retained"
SNAPSHOT_MAX_AGE = "table.datalake.snapshot.max-age"
SNAPSHOT_MIN_RETAINED = "table.datalake.snapshot.min-retained"
STREAM_MAX_SNAPSHOTS = "table.datalake.stream.max-snapshots"
AUTO_COMPACTION = "table.datalake.auto-compaction"
# ---- tierlake's bookkeeping --------------------------------------------------
LAKE_TABLE_PROPERTY = "tierlake.lake-table"
KV_TABLE_PROPERTY = "tierlake.kv-table"
LOG_START_PROPERTY = "tierlake.log.start-position"
STREAM_TABLE_PROPERTY = "tierlake.stream-table"
KV_OF_PROPERTY = "tierlake.kv-table-of"
LAKE_FIELD_IDS = "tierlake.lake.field-ids"
FRESH_VIEW_PROPERTY = "tierlake.fresh-view"
# The lake's tiered position, set in the same metadata commit as every tiering lake commit: snapshot expiry
# (a user's or tierlake's) cannot remove it, unlike the summaries (server/changelog/planner.py).
LAKE_TIERED_POSITION = "tierlake.lake.tiered-position"
LAKE_TIERED_SNAPSHOT = "tierlake.lake.tiered-snapshot-id"
LAKE_STREAM_UUID = "tierlake.lake.stream-uuid"
LAKE_MAIN_SNAPSHOT = "tierlake.lake.tiered-lake-snapshot-id"
NEXT_TABLE_ID = "tierlake.next-table-id"
# ---- Iceberg's own properties tierlake sets ----------------------------------
METADATA_DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
METADATA_PREVIOUS_VERSIONS = "write.metadata.previous-versions-max"
FORMAT_VERSION = "format-version"
WRITE_MERGE_MODE = "write.merge.mode"
WRITE_UPDATE_MODE = "write.update.mode"
WRITE_DELETE_MODE = "write.delete.mode"
MAX_SNAPSHOT_AGE = "history.expire.max-snapshot-age-ms"
# ---- commit (snapshot summary) properties ------------------------------------
SOURCE_POSITION = "tiering.source-position"
SOURCE_SNAPSHOT = "tiering.source-snapshot-id"
TIERING_TABLE_ID = "tiering.table-id"
TIERING_EPOCH = "tiering.epoch"
TIERING_JOB_ID = "tiering.job-id"
COMMIT_USER = "commit-user"
MAINTENANCE = "tierlake.maintenance"
# Also the session setting that names a client's next write (docs/ingest.md).
WRITE_REQUEST_ID = "tierlake.write.request-id"
KV_POSITION = "tierlake.kv.log-position"
KV_STREAM_SNAPSHOT = "tierlake.kv.stream-snapshot-id"

DEFAULT_BUCKETS = 4
DEFAULT_FRESHNESS = "1 min"
QUALITY_MODES = ("off", "warn", "block")
# Properties of a stream table the coordinator keeps a copy of (freshness may change with ALTER TABLE).
TIERING_PROPERTY_PREFIXES = ("table.", PRIMARY_KEY, BUCKETS, SEQUENCE_BY)


@dataclass(frozen=True)
class Property:
    key: str
    default: str | None
    type: str  # str, int, bool, duration, choice, columns, table, position, transforms
    help: str
    table: str = "stream"  # which table carries it: stream, lake, kv (commit properties: the snapshot's table)
    internal: bool = False  # set by tierlake, not by users
    setting: str | None = None  # unset, it defaults to this server setting
    fallback: str | None = None  # unset, it defaults to this property
    choices: tuple[str, ...] = ()
    example: str = ""  # a valid value, quoted as users write it (error messages, docs)
    minimum: int | None = None  # int properties: the smallest value allowed
    maximum: int | None = None  # int properties: the largest value allowed
    min_seconds: float | None = None  # duration properties: the shortest value allowed

    @property
    def kind(self) -> values.Kind:
        """How :func:`validate` checks a value users set: a duration needs a unit (except '0'), bools are
        only true/false, ints and durations within their bounds."""
        return values.Kind(self.type, minimum=self.minimum, maximum=self.maximum, unit_required=True,
                           min_seconds=self.min_seconds, choices=self.choices)


TABLE_PROPERTIES: tuple[Property, ...] = (
    Property(ENABLED, None, "bool", "`'true'` makes the table tiered", example="'true'"),
    Property(PRIMARY_KEY, None, "columns",
             "comma-separated key columns, created `NOT NULL`; unset, the table is a log table",
             example="'order_id' or 'region, order_id'"),
    Property(BUCKETS, str(DEFAULT_BUCKETS), "int", "buckets of a primary-key stream/lake table (1–1024)",
             example="'4'", minimum=1, maximum=1024),
    Property(SEQUENCE_BY, None, "column", "orders changes to one key within a commit (needs `primary-key`)",
             example="'ts'"),
    Property(FRESHNESS_PROPERTY, DEFAULT_FRESHNESS, "duration",
             "how stale the lake may get, at least `1 s` (each round costs a lake commit); `ALTER TABLE … SET "
             "TBLPROPERTIES` through the gateway checks the value and reschedules at once",
             example="'1 min' or '30 s'", min_seconds=1),
    Property(LAKE_PARTITION, None, "transforms", "lake table partition transforms, e.g. `days(ts), bucket(4, id)`",
             example="'days(ts), bucket(4, id)'"),
    Property(MAX_ROUND, None, "duration",
             "a round that reaches it commits what it has and reports force-finished", fallback=FRESHNESS_PROPERTY,
             example="'10 min'"),
    Property(CHUNK_ROWS, None, "int", "rows per lake commit within a round", setting="tierlake.tiering.chunk-rows",
             example="'1000000'", minimum=1),
    Property(QUALITY, "off", "choice", "data-quality checks of each round; checked on `CREATE`/`ALTER TABLE`",
             choices=QUALITY_MODES, example="'warn'"),
    Property(LOG_TTL, None, "duration",
             "log retention: changelog older than this is removed once tiered and covered by a KV snapshot",
             example="'7 d'"),
    Property(SNAPSHOT_INTERVAL, None, "duration", "periodic KV snapshots (primary-key tables); `0` = only on demand",
             setting="tierlake.kv.snapshot.interval", example="'10 min' or '0'"),
    Property(NUM_RETAINED, None, "int", "KV snapshots kept besides leased ones",
             setting="tierlake.kv.snapshot.num-retained", example="'2'", minimum=1),
    Property(SNAPSHOT_MAX_AGE, "1 d", "duration",
             "managed maintenance expires lake (and tiered stream) snapshots older than this, never the "
             "tiered position's, a tag's or a lease's", example="'1 d' or '6 h'"),
    Property(SNAPSHOT_MIN_RETAINED, "10", "int", "snapshots managed maintenance always keeps on the lake and "
             "stream table", example="'10'", minimum=1),
    Property(STREAM_MAX_SNAPSHOTS, "100", "int",
             "stream snapshots managed maintenance keeps at most once tiered (and not needed by a KV snapshot or "
             "a lease), whatever their age: bounds the stream's metadata at any write rate (request ids outlive "
             "their snapshots, [ingest.md](ingest.md))", example="'100'", minimum=1),
    Property(AUTO_COMPACTION, "true", "bool",
             "managed maintenance rewrites small data files and merge-on-read delete files of the lake table, "
             "and small data files of the stream table (thresholds in [tiering.md](tiering.md#managed-maintenance))",
             example="'false'"),
    Property(FORMAT_VERSION, "2", "int", "Iceberg format version of stream, lake and KV tables (set unless given)",
             example="'2'", minimum=1, maximum=3),
    Property(LAKE_TABLE_PROPERTY, None, "table", "the stream table's lake table (`<db><suffix>.<table>`)",
             internal=True),
    Property(FRESH_VIEW_PROPERTY, None, "table",
             "the stream table's fresh view (`<db><suffix>.<table>`), re-pinned after each round with a lake commit",
             internal=True),
    Property(KV_TABLE_PROPERTY, None, "table", "the primary-key stream table's KV table (`sys.kv_…`)", internal=True),
    Property(LOG_START_PROPERTY, "0", "position", "log retention: the changelog is complete after this position",
             internal=True),
    Property(STREAM_TABLE_PROPERTY, None, "table", "the lake table's stream table", table="lake", internal=True),
    Property(WRITE_MERGE_MODE, None, "str", "`merge-on-read` on primary-key lake and KV tables", table="lake",
             internal=True),
    Property(WRITE_UPDATE_MODE, None, "str", "`merge-on-read` on primary-key lake and KV tables", table="lake",
             internal=True),
    Property(WRITE_DELETE_MODE, None, "str", "`merge-on-read` on primary-key lake and KV tables", table="lake",
             internal=True),
    Property(KV_OF_PROPERTY, None, "table", "the KV table's stream table", table="kv", internal=True),
    Property(NEXT_TABLE_ID, None, "int",
             "on `sys.tiering_tables`: the next table id, set in the commit that registers a table (ids are never "
             "reused)", table="sys", internal=True),
    Property(LAKE_FIELD_IDS, None, "str",
             "JSON `{stream field id: lake column}`: which stream column each lake (or KV) column carries, "
             "so renames follow the column and a dropped one is known", table="lake", internal=True),
    Property(LAKE_TIERED_POSITION, None, "position",
             "the stream position the lake covers, written with every tiering lake commit (survives snapshot expiry)",
             table="lake", internal=True),
    Property(LAKE_TIERED_SNAPSHOT, None, "int", "the stream snapshot at that position", table="lake", internal=True),
    Property(LAKE_MAIN_SNAPSHOT, None, "int",
             "the lake snapshot (`main` after that commit) whose rows cover that position: a lake table whose "
             "`main` no longer descends from it was replaced", table="lake", internal=True),
    Property(LAKE_STREAM_UUID, None, "str",
             "the Iceberg table UUID of the stream table the lake's rows came from (a re-created stream differs)",
             table="lake", internal=True),
    Property(METADATA_DELETE_AFTER_COMMIT, None, "bool",
             "`true` on lake and `sys` tables: old metadata files are deleted after each commit", table="lake",
             internal=True),
    Property(METADATA_PREVIOUS_VERSIONS, None, "int",
             "`5` on lake and `sys` tables: metadata files kept besides the current one", table="lake",
             internal=True),
    Property(MAX_SNAPSHOT_AGE, None, "int",
             "a century on KV tables: their retention is tierlake's, not Iceberg's age-based expiry", table="kv",
             internal=True),
)

COMMIT_PROPERTIES: tuple[Property, ...] = (
    Property(TIERING_TABLE_ID, None, "int", "the tiered table's id in `sys.tiering_tables`", table="lake",
             internal=True),
    Property(TIERING_EPOCH, None, "int", "the tiering epoch of the round", table="lake", internal=True),
    Property(TIERING_JOB_ID, None, "str", "the job that wrote the round", table="lake", internal=True),
    Property(SOURCE_POSITION, None, "position", "the stream log position the lake covers after this commit",
             table="lake", internal=True),
    Property(SOURCE_SNAPSHOT, None, "int", "the stream snapshot at that position", table="lake", internal=True),
    Property(COMMIT_USER, None, "str", "who committed (tierlake's tiering)", table="lake", internal=True),
    Property(MAINTENANCE, None, "str", "the maintenance that made this commit (e.g. `log-retention`)",
             table="stream", internal=True),
    Property(WRITE_REQUEST_ID, None, "str", "the request keys (a keyed hash of the user and its "
             "`tierlake.write.request-id`, one per line) of the writes this stream snapshot committed: a write "
             "with one of them again writes nothing ([ingest.md](ingest.md))", table="stream", internal=True),
    Property(KV_POSITION, None, "position", "the stream position a KV snapshot covers", table="kv", internal=True),
    Property(KV_STREAM_SNAPSHOT, None, "int", "the stream snapshot at that position", table="kv", internal=True),
)

BY_KEY: dict[str, Property] = {p.key: p for p in TABLE_PROPERTIES}
COMMIT_BY_KEY: dict[str, Property] = {p.key: p for p in COMMIT_PROPERTIES}


def lookup(key: str) -> Property:
    try:
        return BY_KEY[key]
    except KeyError:
        raise LookupError(f"{key} is not a registered table property") from None


def raw(props: dict[str, str], key: str, config: Any = None) -> str | None:
    """The text of property ``key``: the table's value, else its fallback
    property, else its server setting (from ``config``, or the setting's
    default), else the registry default."""
    prop = lookup(key)
    value = props.get(key)
    if value is not None and value != "":
        return value
    if prop.fallback:
        return raw(props, prop.fallback, config)
    if prop.setting:
        setting = settings.lookup(prop.setting)
        return config.get(prop.setting, setting.default) if config is not None else setting.default
    return prop.default


# What :func:`read` parses a stored value as: no bounds, a bare number is milliseconds (what was set was checked).
_READ_KINDS = {"int": values.Kind("int"), "position": values.Kind("int"), "duration": values.Kind("duration"),
               "bool": values.Kind("bool")}


def read(props: dict[str, str], key: str, config: Any = None) -> Any:
    """The typed value of property ``key`` (see :func:`raw` for the default);
    a bad value raises ``InvalidArgumentError`` naming the key."""
    prop = lookup(key)
    text = raw(props, key, config)
    if text is None or prop.type not in _READ_KINDS:
        return text
    try:
        return values.parse(text, _READ_KINDS[prop.type], key)
    except values.BadValue as bad:
        if prop.type == "bool":
            return False  # a stored flag is on only when it says 'true'
        if prop.type == "duration":
            raise InvalidArgumentError(bad.detail) from None  # the duration parser's message, naming the key
        raise InvalidArgumentError(f"'{key}' must be a whole number, got {text!r}") from None


# ---- validation of what users set --------------------------------------------

# Unknown keys under these prefixes are typos of ours, not someone else's
# properties: they are refused with a did-you-mean.
CHECKED_PREFIXES = ("table.datalake.", "table.log.", "kv.")
INTERNAL_PREFIX = "tierlake."
_NAME = re.compile(r"^[A-Za-z_]\w*$")


def _normal(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


# User properties by their letters and digits alone; those outside the checked prefixes.
_BY_NORMAL = {_normal(p.key): p.key for p in TABLE_PROPERTIES if not p.internal}
_TOP_BY_NORMAL = {n: k for n, k in _BY_NORMAL.items() if not k.startswith(CHECKED_PREFIXES)}


def lookalike(key: str) -> str | None:
    """The user property ``key`` was probably meant to be (``primary_key``,
    ``Bucket.Num``, ``primary.keys``), or None for an exact key or one that
    looks like none of them (Iceberg's and users' own keys)."""
    if key in BY_KEY:
        return None
    normal = _normal(key)
    if normal in _BY_NORMAL:
        return _BY_NORMAL[normal]
    match = difflib.get_close_matches(normal, list(_TOP_BY_NORMAL), n=1, cutoff=0.85)
    return _TOP_BY_NORMAL[match[0]] if match else None


def governed(key: str) -> bool:
    """``key`` is one :func:`validate` checks (a user property, a checked prefix,
    ``tierlake.*``, or a key that looks like a user property)."""
    prop = BY_KEY.get(key)
    return ((prop is not None and not prop.internal) or key.startswith((*CHECKED_PREFIXES, INTERNAL_PREFIX))
            or lookalike(key) is not None)


def expected(prop: Property) -> str:
    """What a valid value of ``prop`` looks like, for error messages."""
    example = f" such as {prop.example}" if prop.example else ""
    if prop.type == "bool":
        return "'true' or 'false'"
    if prop.type == "choice":
        return "one of " + ", ".join(f"'{c}'" for c in prop.choices)
    if prop.type == "duration":
        least = f" of at least {prop.min_seconds:g} s" if prop.min_seconds is not None else ""
        return f"a duration{least}{example}"
    if prop.type == "int":
        if prop.minimum is not None and prop.maximum is not None:
            bounds = f" from {prop.minimum} to {prop.maximum}"
        elif prop.minimum is not None:
            bounds = f" of at least {prop.minimum}"
        else:
            bounds = ""
        return f"a whole number{bounds}{example}"
    if prop.type == "columns":
        return f"comma-separated column names{example}"
    if prop.type == "column":
        return f"a column name{example}"
    if prop.type == "transforms":
        return f"partition transforms (years, months, days, hours, identity, bucket(n, c), truncate(n, c)){example}"
    return f"a value{example}"


def _invalid(prop: Property, value: str, reason: str | None = None) -> InvalidArgumentError:
    why = f"{reason}; expected {expected(prop)}" if reason else f"expected {expected(prop)}"
    return InvalidArgumentError(f"invalid value {value!r} for table property '{prop.key}': {why}")


def _unknown(key: str) -> InvalidArgumentError:
    if key.startswith(INTERNAL_PREFIX):
        return InvalidArgumentError(
            f"table property '{key}' is tierlake's own bookkeeping and cannot be set by users")
    known = sorted(p.key for p in TABLE_PROPERTIES if not p.internal)
    prefix = next(p for p in CHECKED_PREFIXES if key.startswith(p))
    siblings = [k for k in known if k.startswith(prefix)]
    # Compare what follows the shared prefix (every 'table.datalake.x' looks
    # alike in full), then whole keys strictly (a key under the wrong prefix).
    match = difflib.get_close_matches(key[len(prefix):], [k[len(prefix):] for k in siblings], n=1, cutoff=0.6)
    match = [prefix + match[0]] if match else difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    if match:
        return InvalidArgumentError(f"unknown table property '{key}'; did you mean '{match[0]}'?")
    return InvalidArgumentError(f"unknown table property '{key}'; known properties under '{prefix}': "
                                + (", ".join(siblings) or "none"))


def _names(prop: Property, value: str, columns: set[str] | None) -> list[str]:
    names = [n.strip() for n in value.split(",")]
    if any(not _NAME.match(n) for n in names):
        raise _invalid(prop, value)
    lowered = [n.lower() for n in names]
    if len(set(lowered)) != len(lowered):
        raise _invalid(prop, value, "a column is named twice")
    if prop.type == "column" and len(names) != 1:
        raise _invalid(prop, value, "one column only")
    missing = [n for n in lowered if columns is not None and n not in columns]
    if missing:
        raise _invalid(prop, value, f"{missing[0]!r} is not a column of the table ({', '.join(sorted(columns))})")
    return lowered


# The reason an error gives for what values.parse refused (none: the expected value alone says it).
_REASONS = {
    values.EMPTY: "empty",
    # A bare number would be milliseconds (Fluss's reading): '5' meant as
    # minutes became 5 ms. Only '0' may go without a unit.
    values.NEEDS_UNIT: "a duration needs a unit (ms, s, min, h, d)",
    values.SHORTER_THAN_MINIMUM: "shorter than the minimum",
    values.BELOW_MINIMUM: "out of range",
    values.ABOVE_MAXIMUM: "out of range",
}


def _check(prop: Property, value: str, columns: set[str] | None) -> None:
    if not value.strip():
        raise _invalid(prop, value, "empty")
    if prop.type in values.KINDS:
        try:
            values.parse(value, prop.kind, prop.key)
        except values.BadValue as bad:
            raise _invalid(prop, value, _REASONS.get(bad.reason)) from None
    elif prop.type in ("columns", "column"):
        _names(prop, value, columns)
    elif prop.type == "transforms":
        for text in split_transforms(value):
            try:
                column = parse_transform(text, prop.key).column
            except InvalidArgumentError:
                raise _invalid(prop, value, f"cannot read {text!r}") from None
            if columns is not None and column not in columns:
                raise _invalid(prop, value, f"{column!r} is not a column of the table")


def validate(props: dict[str, str], columns: Iterable[Any] | None = None) -> None:
    """Refuse a bad user-set table property before anything is created or changed.

    Every user property present must parse as its type (durations, whole
    numbers in range, choices, booleans, partition transforms); column
    properties must name columns of the table when ``columns`` (names or
    :class:`Column`-like objects with ``name``) are known; ``sequence-by``
    needs ``primary-key``. ``tierlake.*`` keys are tierlake's own and refused;
    unknown keys under ``table.datalake.``, ``table.log.`` and ``kv.``, and
    keys that look like a user property (:func:`lookalike`), are refused
    with a did-you-mean. Other keys (Iceberg's, users' own) pass.
    Raises ``InvalidArgumentError`` naming the property, the value and an example.
    """
    names = None if columns is None else {str(getattr(c, "name", c)).lower() for c in columns}
    for key, value in props.items():
        prop = BY_KEY.get(key)
        if prop is None or prop.internal:
            if key.startswith((*CHECKED_PREFIXES, INTERNAL_PREFIX)):
                raise _unknown(key)
            meant = lookalike(key)
            if meant is not None:
                raise InvalidArgumentError(f"unknown table property '{key}'; did you mean '{meant}'?")
            continue
        _check(prop, "" if value is None else str(value), names)
    if (props.get(SEQUENCE_BY) or "").strip() and not (props.get(PRIMARY_KEY) or "").strip():
        raise InvalidArgumentError(
            f"table property '{SEQUENCE_BY}' needs a '{PRIMARY_KEY}': it orders changes to one key")


def user_properties(props: dict[str, str]) -> dict[str, str]:
    """``props`` without tierlake's own ``tierlake.*`` bookkeeping (what an existing table carries)."""
    return {k: v for k, v in props.items() if not k.startswith(INTERNAL_PREFIX)}


# ---- docs/configuration.md ---------------------------------------------------

def _default_text(prop: Property) -> str:
    if prop.fallback:
        return f"`{prop.fallback}`"
    if prop.setting:
        return f"`{prop.setting}` (`{settings.lookup(prop.setting).default}`)"
    return f"`{prop.default}`" if prop.default is not None else "none"


def _markdown(props: tuple[Property, ...], commit: bool = False) -> str:
    if commit:
        rows = ["| property | snapshot of | type | meaning |", "|---|---|---|---|"]
        rows += [f"| `{p.key}` | {p.table} table | {p.type} | {p.help} |" for p in props]
        return "\n".join(rows)
    rows = ["| property | table | type | default | set by | example | meaning |", "|---|---|---|---|---|---|---|"]
    for p in props:
        kind = f"{p.type}: {' / '.join(p.choices)}" if p.choices else p.type
        owner = "tierlake" if p.internal else "user"
        example = p.example.replace("'", "`") if p.example else ""
        rows.append(f"| `{p.key}` | {p.table} | {kind} | {_default_text(p)} | {owner} | {example} | {p.help} |")
    return "\n".join(rows)


def table_properties_markdown() -> str:
    return _markdown(TABLE_PROPERTIES)


def commit_properties_markdown() -> str:
    return _markdown(COMMIT_PROPERTIES, commit=True)
