"""Every ``tierlake.*`` setting in one declarative registry (datasette's ``SETTINGS`` style).

A setting is its key, its default (the text a config file would hold; ``""``
means empty, ``None`` unset), its type and a one-line help. :class:`Config`
takes its defaults from here, checks values against the type at load and
refuses keys that are not here; docs/configuration.md renders the table::

    python -m tierlake.server.config_docs --markdown   # print the tables
    python -m tierlake.server.config_docs --write      # update the doc in place

Table properties have their own registry: :mod:`tierlake.server.catalog.properties`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tierlake.server.config import values
from tierlake.server.exceptions import ConfigError

TYPES = ("str", "int", "duration", "bool", "path", "choice", "list", "secret")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


@dataclass(frozen=True)
class Setting:
    key: str
    default: str | None
    type: str
    help: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    default_doc: str | None = None  # how the docs describe the default, when the text alone would mislead

    @property
    def optional(self) -> bool:
        """Whether an empty value is allowed (it means "off"/"none")."""
        return not self.default

    def parse(self, raw: str | None) -> Any:
        """The typed value of ``raw``; ``ConfigError`` naming the key if it is not one."""
        if raw is None:
            return None
        text = raw.strip()
        if self.type in ("str", "path", "secret"):
            return raw if self.type == "secret" else text
        if self.type == "list":
            return [part.strip() for part in text.split(",") if part.strip()]
        if not text and self.type == "choice" and self.default:
            text = self.default  # an empty choice has always meant the default
        if self.type not in values.KINDS:
            raise AssertionError(f"unknown setting type {self.type!r} of {self.key}")
        try:
            return values.parse(text, self.kind, self.key)
        except values.BadValue as bad:
            raise ConfigError(self._refusal(bad, raw)) from None

    @property
    def kind(self) -> values.Kind:
        """How :func:`values.parse` reads this setting: an empty optional one is None, bools take yes/no/on/off/1/0."""
        return values.Kind(self.type, optional=self.optional, minimum=self.minimum, true_words=_TRUE,
                           false_words=_FALSE, choices=self.choices)

    def _refusal(self, bad: values.BadValue, raw: str) -> str:
        if bad.reason == values.EMPTY:
            return f"{self.key} needs a value ({self._expected()})"
        if bad.reason == values.NOT_A_DURATION:
            return bad.detail  # the duration parser's message, naming the key
        if bad.reason == values.BELOW_MINIMUM:
            return f"{self.key} must be at least {self.minimum}, got {bad.value}"
        wanted = {values.NOT_AN_INTEGER: "an integer", values.NOT_A_BOOL: "true or false",
                  values.NOT_A_CHOICE: f"one of {', '.join(self.choices)}"}[bad.reason]
        return f"{self.key} must be {wanted}, got {raw!r}"

    def _expected(self) -> str:
        return {"int": "an integer", "duration": "a duration such as '30 s'", "bool": "true or false",
                "choice": " or ".join(self.choices)}.get(self.type, self.type)


def _s(key: str, default: str | None, type: str, help: str, **kw: Any) -> Setting:
    return Setting(key, default, type, help, **kw)


SETTINGS: tuple[Setting, ...] = (
    _s("tierlake.gateway.host", "127.0.0.1", "str", "gateway bind address (`--host`)"),
    _s("tierlake.gateway.port", "10000", "int", "gateway port (`--port`); `0` picks a free one", minimum=0),
    _s("tierlake.gateway.auth", "PLAIN", "choice",
       "`PLAIN` (SASL PLAIN, what Hive JDBC and PyHive use by default) or `NOSASL` (clients add "
       "`;auth=noSasl`; development only, not with a password file)", choices=("PLAIN", "NOSASL")),
    _s("tierlake.gateway.password-file", "", "path",
       "users, roles and salted password hashes ([security.md](security.md)); set, it turns authentication "
       "and roles on", default_doc="empty (development mode: any user, full rights)"),
    _s("tierlake.gateway.status-cache", "true", "bool",
       "answer repeated deterministic reads of `sys` views from the result Spark gave while `sys` state is unchanged"),
    _s("tierlake.gateway.status-cache.max-age", "10 s", "duration",
       "longest a cached `sys` read is served: bounds what writers outside this process could make stale"),
    _s("tierlake.gateway.ssl.certfile", "", "path",
       "PEM certificate (chain) of the gateway; set, the gateway port speaks TLS only", default_doc="empty (no TLS)"),
    _s("tierlake.gateway.ssl.keyfile", "", "path", "PEM private key of that certificate",
       default_doc="empty (key in the certfile)"),
    _s("tierlake.log.jvm-level", "WARN", "choice",
       "level of the JVM's log, `logs/spark.log` (Spark, Hive, Iceberg): at `INFO` Spark writes lines for "
       "every statement and job; the default keeps warnings and errors", choices=("ERROR", "WARN", "INFO", "DEBUG")),
    _s("tierlake.http.port", "", "int",
       "port of the status page and Prometheus `/metrics` ([observability.md](observability.md)), bound to "
       "`tierlake.gateway.host`, TLS and logins as the gateway's; `0` picks a free port. Unset: off with a "
       "password file, a free port on 127.0.0.1 in development mode (printed in the ready line); "
       "`tierlake tiering-service` serves its own `/metrics` only when set",
       minimum=0, default_doc="empty (see description)"),
    _s("tierlake.gateway.max-statement-size", "1048576", "int",
       "longest statement (bytes, UTF-8) the gateway accepts; longer ones are refused with SQLSTATE 54000",
       minimum=1),
    _s("tierlake.gateway.max-call-size", "65536", "int",
       "longest `CALL sys.*` statement (bytes, UTF-8) the gateway parses; the procedure's name and number of "
       "arguments are checked first, then this bound, then its arguments are parsed (SQLSTATE 54000)",
       minimum=1),
    _s("tierlake.gateway.max-request-size", "16777216", "int",
       "largest Thrift request (bytes) a client may send; a bigger one closes the connection", minimum=1024),
    _s("tierlake.gateway.max-reply-size", "16000000", "int",
       "largest batch of fetched rows (bytes) the gateway passes to a client; a bigger one fails that fetch "
       "with an error instead (Java clients' Thrift cannot read frames over 16384000 bytes)", minimum=65536),
    _s("tierlake.gateway.handshake-timeout", "30 s", "duration",
       "total time a client has for the TLS and SASL handshakes together, however slowly its bytes arrive"),
    _s("tierlake.gateway.max-connections", "256", "int",
       "connections that have logged in (finished TLS and SASL) the gateway keeps open at once; "
       "one more is refused at login with an error", minimum=1),
    _s("tierlake.gateway.max-unauthenticated-connections", "256", "int",
       "connections still in their TLS or SASL handshake, a pool of their own: when it is full a new "
       "connection evicts the oldest one of the address holding the most, so they cannot keep anyone "
       "from logging in", minimum=1),
    _s("tierlake.gateway.max-unauthenticated-per-address", "64", "int",
       "connections in their handshake from one client address (an IPv6 /64); one more evicts that "
       "address's oldest; above the logins one host (a pool, an app server) starts at once", minimum=1),
    _s("tierlake.query.timeout", "1 h", "duration",
       "a statement the gateway relays to Spark (any user's queries, and DML or DDL Spark runs; not "
       "procedures, stream-table INSERTs or tiering) fails after this long with an error naming this "
       "setting; `0` turns it off; a client's shorter per-statement timeout still applies"),
    _s("tierlake.query.reader-timeout", "10 min", "duration",
       "a statement of a user whose highest role is `reader`, relayed to Spark, fails after this long "
       "(the shorter of this and `tierlake.query.timeout`) with an error naming this setting; `0`: "
       "readers get `tierlake.query.timeout` too; applies with a password file (roles known)"),
    _s("tierlake.query.max-result-size", "536870912", "int",
       "largest result (bytes, serialized) one Spark job may bring into the server's memory "
       "(`spark.driver.maxResultSize`); a bigger one fails that query; `0` turns the bound off",
       minimum=0, default_doc="`536870912` (512 MiB)"),
    _s("tierlake.client.password-file", "", "path",
       "file whose first line is the password `tierlake tiering-service` logs in with (after `--password` "
       "and `$TIERLAKE_PASSWORD`)"),
    _s("tierlake.client.ssl.ca-file", "", "path",
       "CA certificate (PEM) `tierlake tiering-service` checks a `;ssl=true` gateway with",
       default_doc="empty (system CAs)"),
    _s("tierlake.master", "local[*]", "str", "Spark master (`--master`)"),
    _s("tierlake.thrift.internal-port", "0", "int", "port of the internal Spark Thrift Server, on 127.0.0.1",
       minimum=0, default_doc="`0` (free port)"),
    _s("tierlake.extensions", "", "list", "comma-separated modules to import at start (user procedures and UDFs)"),
    _s("tierlake.lake.database-suffix", "_lake", "str", "lake tables live in `<db><suffix>`"),
    _s("tierlake.fresh.database-suffix", "_fresh", "str",
       "fresh views (lake + changes not tiered yet, docs/tiering.md) live in `<db><suffix>`"),
    _s("tierlake.fresh.local-merge-rows", "100000", "int",
       "a fresh view merges its pending changes in the driver while the query is planned when the pending "
       "files hold at most this many rows (no extra Spark job); above it, with Spark (`0`: always with Spark)",
       minimum=0),
    _s("tierlake.tiering.heartbeat-timeout", "2 min", "duration",
       "a job silent this long loses its tables (`Failed` → `Pending`)"),
    _s("tierlake.tiering.retry-backoff", "5 s", "duration",
       "wait before a Failed table is retried, doubled per consecutive failure"),
    _s("tierlake.tiering.retry-backoff-max", "5 min", "duration", "cap of that wait"),
    _s("tierlake.tiering.lag-probe-interval", "5 s", "duration",
       "how often the server records stream commits not yet tiered (`sys.lake_tiering_lag`); `0` turns it off"),
    _s("tierlake.coordinator.interval", "5 s", "duration", "how often the server checks timeouts and due tables"),
    _s("tierlake.tiering.workers", "1", "int", "tiering worker threads in the server (`--workers`)", minimum=0),
    _s("tierlake.tiering.tables-per-job", "4", "int",
       "tables one tiering job (worker) holds and tiers at once, each round in its own thread", minimum=1),
    _s("tierlake.tiering.poll-interval", "1 s", "duration", "how often an idle worker asks for a table"),
    _s("tierlake.tiering.chunk-rows", "5000000", "int",
       "rows per lake commit within a round (table property `table.datalake.tiering.chunk-rows`)", minimum=1),
    _s("tierlake.kv.snapshot.interval", "10 min", "duration",
       "periodic KV snapshots of primary-key tables (table property `kv.snapshot.interval`); `0` turns them off"),
    _s("tierlake.kv.snapshot.num-retained", "2", "int",
       "KV snapshots kept per table besides leased ones (table property `kv.snapshot.num-retained`)", minimum=1),
    _s("tierlake.kv.maintenance-interval", "1 min", "duration",
       "how often the server takes due KV snapshots, applies their retention and `table.log.ttl`"),
    _s("tierlake.sys.snapshots-retained", "10", "int",
       "snapshots each `sys` state table keeps; older ones are expired (with their files) by the server's "
       "housekeeping", minimum=2),
    _s("tierlake.sys.housekeeping-interval", "1 min", "duration",
       "how often the server expires `sys` snapshots, applies history retention, compacts history tables and "
       "removes orphan files (a table that reached 50 commits since its last expiry is expired at once)"),
    _s("tierlake.history.retention", "7 d", "duration",
       "rows of `sys.tiering_rounds`, `sys.lake_data_quality` and `sys.lake_maintenance` older than this "
       "are deleted"),
    _s("tierlake.write.request-id-retention", "1 h", "duration",
       "a stream table remembers each committed `tierlake.write.request-id` for as long as the snapshot that "
       "committed it is kept, and at least this long "
       "([ingest.md](ingest.md#request-ids-retries-that-never-duplicate))"),
    _s("tierlake.tiering.job-retention", "7 d", "duration",
       "a tiering job silent this long is forgotten (its row in `sys.tiering_job_status` is deleted)"),
    _s("tierlake.maintenance.interval", "10 min", "duration",
       "managed maintenance of a lake and stream table runs after a round at most this often; `0` turns "
       "scheduled maintenance off (`sys.run_maintenance` still works)"),
    _s("tierlake.maintenance.run-timeout", "5 min", "duration",
       "how long `sys.run_maintenance` waits for a tiering worker to run the requested maintenance"),
    _s("tierlake.quality.sample-size", "10", "int",
       "failing keys or values kept per expectation in `sys.lake_data_quality.unexpected_sample`", minimum=0),
    _s("tierlake.metastore.port", "", "int",
       "serve the metastore over Thrift on 127.0.0.1 for `tierlake tiering-service` processes; `0` picks a port",
       minimum=0, default_doc="empty (off)"),
    _s("tierlake.metastore.url", "", "str",
       "JDBC URL of a shared PostgreSQL metastore, `jdbc:postgresql://HOST:PORT/DATABASE`; see "
       "[Shared metastore](#shared-metastore-postgresql)", default_doc="empty (embedded Derby)"),
    _s("tierlake.metastore.user", "", "str", "its user name"),
    _s("tierlake.metastore.password", None, "secret",
       "its password (put it in the config file, not on the command line)"),
    _s("tierlake.metastore.driver-jar", "", "path",
       "the PostgreSQL JDBC driver jar (goes on the driver class path)",
       default_doc="`/usr/share/java/postgresql.jar` when present"),
)

# Spark settings tierlake changes from Spark's own defaults (any ``spark.*`` key overrides them).
SPARK_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
}

BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
PREFIX = "tierlake."


class UnregisteredSettingError(LookupError):
    """Code read a ``tierlake.*`` key that is not in :data:`SETTINGS` (a programming error)."""


def lookup(key: str) -> Setting:
    """The registered setting ``key``; :class:`UnregisteredSettingError` if there is none."""
    try:
        return BY_KEY[key]
    except KeyError:
        raise UnregisteredSettingError(f"{key} is not a registered setting{did_you_mean(key)}") from None


def did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, BY_KEY, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def defaults() -> dict[str, str]:
    """The settings with a default as config text, plus :data:`SPARK_DEFAULTS`."""
    return {**{s.key: s.default for s in SETTINGS if s.default is not None}, **SPARK_DEFAULTS}


def parse_default(key: str) -> Any:
    setting = lookup(key)
    return setting.parse(setting.default)


def duration_default(key: str) -> timedelta:
    value = parse_default(key)
    assert isinstance(value, timedelta), key
    return value


# ---- docs/configuration.md -------------------------------------------------

BEGIN = "<!-- BEGIN GENERATED: {name} (python -m tierlake.server.config_docs --write) -->"
END = "<!-- END GENERATED: {name} -->"
DOC_PATH = "docs/configuration.md"


def _default_text(setting: Setting) -> str:
    if setting.default_doc:
        return setting.default_doc
    if setting.default is None:
        return "unset"
    return f"`{setting.default}`" if setting.default else "empty"


def settings_markdown() -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        kind = f"{s.type}: {' / '.join(s.choices)}" if s.choices else s.type
        rows.append(f"| `{s.key}` | {kind} | {_default_text(s)} | {s.help} |")
    for key, value in SPARK_DEFAULTS.items():
        rows.append(f"| `{key}` | Spark | `{value}` | tierlake's default; Spark's own differs |")
    return "\n".join(rows)
