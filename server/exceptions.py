"""The one exception hierarchy of tierlake.

Every error a client can see derives from :class:`TierlakeError`; the gateway
maps ``sqlstate`` and ``error_code`` onto the Thrift ``TStatus`` so JDBC/ODBC
clients receive a normal SQL error (never a dropped connection).
"""

from __future__ import annotations

# The root and the configuration error are defined by the client
# distribution, so client and server errors share one hierarchy.
from tierlake_client.exceptions import ConfigError, TierlakeError


class HomeInUseError(ConfigError):
    """Another server already owns this ``$TIERLAKE_HOME``."""

    error_code = 1002


class PortInUseError(ConfigError):
    """The gateway's port is taken (checked before Spark starts)."""

    error_code = 1004


class JarResolutionError(ConfigError):
    """The Iceberg runtime jars could not be found or rebuilt."""

    error_code = 1003


class SqlSyntaxError(TierlakeError):
    """A statement the gateway could not parse (e.g. a malformed CALL)."""

    sqlstate = "42601"
    error_code = 2001


class UnknownProcedureError(TierlakeError):
    """``CALL sys.<name>`` names no registered procedure."""

    sqlstate = "42883"
    error_code = 2002


class InvalidArgumentError(TierlakeError):
    """Unknown, missing, duplicated or ill-typed procedure argument."""

    sqlstate = "22023"
    error_code = 2003


class NoSuchTableError(TierlakeError):
    """A referenced table does not exist."""

    sqlstate = "42P01"
    error_code = 2004


class NoSuchColumnError(TierlakeError):
    """A statement names a column that its tables do not have (Spark's
    ``UNRESOLVED_COLUMN``, relayed as one line: server/gateway/transport/errors.py)."""

    sqlstate = "42703"
    error_code = 2015


class InvalidIdentifierError(InvalidArgumentError):
    """An identifier that is not a valid (db.)table name."""

    error_code = 2005


class ReservedNameError(InvalidArgumentError):
    """A tiered table's column takes a name tierlake or Iceberg reserves: the ``__tierlake`` prefix
    (every alias and helper column tierlake's statements generate), or an Iceberg metadata column
    (``_file``, ``_pos``, …: Iceberg cannot read a table with such a column). Refused before anything
    is made (docs/tiering.md, "Reserved names")."""

    sqlstate = "42939"
    error_code = 2300


class UnsupportedKeyTypeError(InvalidArgumentError):
    """A tiered table's ``primary-key`` names a column of a type that cannot be a key (ARRAY, MAP,
    STRUCT, anything but the primitive types tierlake compares exactly as Spark compares grouping
    keys), or a first key column of a type Iceberg cannot bucket by (BOOLEAN, FLOAT, DOUBLE).
    Refused before anything is made (docs/tiering.md, "Key types")."""

    sqlstate = "42P16"
    error_code = 2302


class MigrationError(TierlakeError):
    """The sys schema could not be brought up to date."""

    sqlstate = "XX001"
    error_code = 3001


class ProcedureFailedError(TierlakeError):
    """A procedure raised something that is not a TierlakeError."""

    sqlstate = "XX002"
    error_code = 3002


class IllegalTransitionError(TierlakeError):
    """A tiering state change the state machine does not allow."""

    sqlstate = "55000"
    error_code = 4001


class FencedEpochError(TierlakeError):
    """A heartbeat entry or lake commit carries a tiering epoch that is no longer current."""

    sqlstate = "40001"
    error_code = 4002


class UnknownTableIdError(TierlakeError):
    """A heartbeat entry names a table id the coordinator does not know (dropped?)."""

    sqlstate = "42P01"
    error_code = 4003


class NotAssignedError(TierlakeError):
    """A heartbeat entry for a table that is not being tiered by this job."""

    sqlstate = "55000"
    error_code = 4004


class ConcurrentUpdateError(TierlakeError):
    """The coordinator state changed underneath a procedure too often to retry."""

    sqlstate = "40001"
    error_code = 4005


class TieringGuardError(TierlakeError):
    """A stream table change tiering cannot carry (non-append commit, incompatible schema change)."""

    sqlstate = "55000"
    error_code = 5001


class ChangelogError(TieringGuardError):
    """A primary-key changelog tiering refuses to guess at: an unknown
    ``_change_type``, a NULL key, or two changes to one key in one commit
    whose order cannot be decided. Nothing of the offending commit is tiered."""

    sqlstate = "22000"
    error_code = 5002


class LakeHistoryError(TieringGuardError):
    """The lake table no longer says which stream position it covers: its
    tiering commits were expired and it has no recorded position (never
    guessed as 0, which would tier the whole stream again)."""

    sqlstate = "55000"
    error_code = 5010


class NonAppendCommitError(TieringGuardError):
    """A commit on a stream table that is neither an append nor a ``replace``
    (a user ``DELETE``, ``UPDATE``, ``MERGE`` or overwrite). The message gives
    the calls that take it out without losing any append."""

    sqlstate = "55000"
    error_code = 5011


class StreamReplacedError(TieringGuardError):
    """The stream table was dropped and created again under its name (its
    Iceberg table UUID differs from the one registered, or the lake's rows came
    from another table)."""

    sqlstate = "55000"
    error_code = 5012


class LakeReplacedError(TieringGuardError):
    """The lake table's ``main`` no longer holds the rows its recorded position
    covers: it was replaced (``REPLACE TABLE``, ``CREATE OR REPLACE``) or rolled
    back to before its first tiering commit. Continuing would leave the stream
    rows before that position missing from the lake."""

    sqlstate = "55000"
    error_code = 5013


class QualityCheckError(TierlakeError):
    """A write-audit-publish round whose data failed the table's expectations
    (``table.datalake.quality = block``): nothing was published."""

    sqlstate = "23000"
    error_code = 5101


class MissingDependencyError(TierlakeError):
    """An optional feature's Python package is not installed (the message says what to install)."""

    sqlstate = "0A000"
    error_code = 3003


class TableExistsError(TierlakeError):
    """CREATE TABLE of a table that exists (without IF NOT EXISTS)."""

    sqlstate = "42P07"
    error_code = 2006


class SparkSqlError(TierlakeError):
    """Spark rejected a statement tierlake ran for the client; Spark's SQLSTATE is kept."""

    sqlstate = "42000"
    error_code = 2007

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        if sqlstate:
            self.sqlstate = sqlstate


class OperationCancelledError(TierlakeError):
    """The client cancelled the statement (CancelOperation, or it disconnected);
    what it had started was rolled back."""

    sqlstate = "57014"
    error_code = 2100


class ServerStoppingError(TierlakeError):
    """The server is stopping (SIGINT/SIGTERM): statements already running are
    finished and answered, a new one is refused and was not run — send it
    again once the server is back."""

    sqlstate = "57P01"
    error_code = 2101


class UnsupportedFeatureError(TierlakeError):
    """The server does not support what was asked (e.g. KV snapshot leases on a
    server whose sys schema predates them)."""

    sqlstate = "0A000"
    error_code = 2010


class PermissionDeniedError(TierlakeError):
    """The authenticated user's roles do not allow the statement or procedure."""

    sqlstate = "42501"
    error_code = 2008


class StatementTooLargeError(TierlakeError):
    """A statement longer than ``tierlake.gateway.max-statement-size``."""

    sqlstate = "54000"
    error_code = 2011


class StatementTooComplexError(TierlakeError):
    """A statement nested deeper than Spark's parser can take (parentheses
    past ``parsecost.MAX_NESTING``, or Spark's parser out of stack): refused
    before or instead of a parse that would cost seconds and then fail."""

    sqlstate = "54001"
    error_code = 2040


class ResultTooLargeError(TierlakeError):
    """A batch of fetched rows larger than ``tierlake.gateway.max-reply-size``."""

    sqlstate = "54000"
    error_code = 2013


class AuthenticationError(TierlakeError):
    """The client did not authenticate the way the gateway requires (e.g. a
    NOSASL client at a SASL gateway)."""

    sqlstate = "28000"
    error_code = 2009


class MaintenanceNotRunError(TierlakeError):
    """``sys.run_maintenance`` could not have the table's maintenance run: no
    tiering job is alive, or none took the table within the timeout."""

    sqlstate = "55000"
    error_code = 4006


class WriteRefusedError(TierlakeError):
    """An ``INSERT`` into a stream table whose rows break its rules; nothing is written."""

    sqlstate = "22023"
    error_code = 2200


class InvalidChangeTypeError(WriteRefusedError):
    """A ``_change_type`` outside ``+I -U +U -D NULL`` in an INSERT into a primary-key stream table."""

    sqlstate = "22023"
    error_code = 2201


class NullKeyError(WriteRefusedError):
    """A NULL primary-key column in an INSERT into a primary-key stream table."""

    sqlstate = "23502"
    error_code = 2202


class AmbiguousChangesError(WriteRefusedError):
    """An INSERT into a primary-key stream table with different changes to one
    key that the table's ``sequence-by`` does not order (tiering could not
    decide which one wins)."""

    sqlstate = "21000"
    error_code = 2204


class WriteOutcomeUnknownError(TierlakeError):
    """A stream-table commit whose outcome the metastore did not confirm: retry with the same request id."""

    sqlstate = "40003"
    error_code = 2203


class InvalidRequestIdError(InvalidArgumentError):
    """A ``tierlake.write.request-id`` refused at ``SET``: longer than 256 characters, or with a
    control, format (bidi), line or paragraph separator character (Unicode Cc, Cf, Zl, Zp)."""

    sqlstate = "22023"
    error_code = 2205


class UnknownSettingError(TierlakeError):
    """``SET`` of a ``tierlake.*`` key that is not a session setting (a close one is suggested)."""

    sqlstate = "42704"
    error_code = 2014


class InvalidHandleError(TierlakeError):
    """A session or operation handle that is not one of the caller's own:
    unknown, closed, or opened on another client connection. Such a request
    is answered by the gateway and never reaches the Spark Thrift Server."""

    sqlstate = "HY000"
    error_code = 2012


class TieredDdlError(TierlakeError):
    """A step of a tiered ``CREATE``/``ALTER``/``DROP`` failed: what the earlier steps made was undone
    (the message names the step, the cause, and what was undone); the cause's SQLSTATE is kept."""

    sqlstate = "XX000"
    error_code = 2301

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        if sqlstate:
            self.sqlstate = sqlstate


# The SQLSTATE of a JVM exception that reaches Python raw (Iceberg's catalog exceptions are not Spark
# errors and carry none), by its class's simple name: one table for the gateway's relay and tiered DDL.
JAVA_EXCEPTION_STATES = {
    "NoSuchNamespaceException": "3F000",
    "NoSuchTableException": "42P01",
    "AlreadyExistsException": "42P07",
    "ValidationException": "22023",
    "CommitFailedException": "40001",
}
