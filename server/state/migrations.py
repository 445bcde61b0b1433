"""Bring the ``sys`` schema up to date and (re)create the sys views.

``sql/schema/NNNN_name.sql`` files run in order, each at most once per home:
a migration is recorded in ``sys.schema_version`` after all its statements
succeeded. Every statement is written to be idempotent (``IF NOT EXISTS``),
so a crash between a statement and the record only repeats harmless work.
Spark 3.5 has no ``ADD COLUMNS IF NOT EXISTS``: an ``ALTER TABLE … ADD
COLUMNS`` that fails because its columns exist already (a re-run) counts as done.
Views (``sql/views/*.sql``) are plain ``CREATE OR REPLACE VIEW`` and run at
every start, so a new release's view definitions always win.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from tierlake import sql
from tierlake.server.config.config import Config
from tierlake.server.exceptions import MigrationError
from tierlake.server.runtime.jvm_errors import Kind, is_
from tierlake.server.state import state_version

log = logging.getLogger("tierlake.migrations")

SCHEMA_DIR = "schema"
VIEWS_DIR = "views"
Q_RECORD_MIGRATION = "queries/record_migration.sql"
Q_APPLIED_MIGRATIONS = "queries/applied_migrations.sql"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_ADD_COLUMNS = re.compile(r"^\s*ALTER\s+TABLE\s+\S+\s+ADD\s+COLUMNS?\b", re.IGNORECASE)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def statements(self) -> list[str]:
        return sql.split_statements(self.text)


def available() -> list[Migration]:
    """The shipped migrations, in order; names must be ``NNNN_name.sql``."""
    out = []
    for path in sql.files(SCHEMA_DIR):
        m = _NAME.match(path.name)
        if not m:
            raise MigrationError(f"bad migration file name {path.name}: expected NNNN_name.sql")
        out.append(Migration(int(m.group(1)), path.name, path.read_text(encoding="utf-8")))
    versions = [m.version for m in out]
    if len(set(versions)) != len(versions):
        raise MigrationError("two migrations share a number")
    return out


def schema_version(spark: Any) -> int:
    """The highest applied migration, 0 on a fresh home."""
    return max(applied(spark), default=0)


def applied(spark: Any) -> dict[int, str]:
    if not spark.catalog.tableExists("sys.schema_version"):
        return {}
    rows = spark.sql(sql.read(Q_APPLIED_MIGRATIONS)).collect()
    return {r["version"]: r["checksum"] for r in rows}


def migrate(spark: Any) -> list[int]:
    """Apply pending migrations; return the versions applied now."""
    done = applied(spark)
    ran = []
    for migration in available():
        if migration.version in done:
            if done[migration.version] != migration.checksum:
                log.warning(
                    "migration %s changed after it was applied; it is not re-run", migration.name
                )
            continue
        log.info("applying migration %s", migration.name)
        for statement in migration.statements:
            try:
                spark.sql(statement)
            except Exception as e:
                if already_added(statement, e):
                    log.info("migration %s: the columns exist already (a re-run)", migration.name)
                    continue
                raise MigrationError(f"migration {migration.name} failed: {e}") from e
        spark.sql(
            sql.read(Q_RECORD_MIGRATION),
            args={"version": migration.version, "name": migration.name, "checksum": migration.checksum},
        )
        ran.append(migration.version)
    return ran


def already_added(statement: str, error: Exception) -> bool:
    """``statement`` adds columns and ``error`` says they exist: an ADD COLUMNS
    that ran before the crash that kept its migration from being recorded."""
    body = "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--"))
    # FIELDS_ALREADY_EXISTS from Spark's v2 analysis (Iceberg tables);
    # COLUMN_ALREADY_EXISTS if a v1 command ever handles it.
    return bool(_ADD_COLUMNS.match(body)) and is_(error, Kind.FIELDS_ALREADY_EXISTS)


def view_params(config: Any = None) -> dict[str, Any]:
    """What the view templates (``sql/views/*.sql.j2``) are rendered with.

    ``silent_after_seconds``: half the heartbeat timeout, the heartbeat age past which
    ``sys.lake_tiering_health`` says a job went quiet (the template says why half)."""
    config = config if config is not None else Config.defaults()
    return {"silent_after_seconds": max(1, int(config.seconds("tierlake.tiering.heartbeat-timeout") / 2))}


def create_views(spark: Any, config: Any = None) -> list[str]:
    """(Re)create every sys view: the plain ones (``*.sql``), then the templates (``*.sql.j2``,
    which may read the plain ones) rendered with :func:`view_params`."""
    names = []
    texts = [(path, path.stem, path.read_text(encoding="utf-8")) for path in sql.files(VIEWS_DIR)]
    params = view_params(config)
    texts += [(path, path.name.removesuffix(".sql.j2"), sql.render(f"{VIEWS_DIR}/{path.name}", **params))
              for path in sql.files(VIEWS_DIR, ".sql.j2")]
    for path, name, text in texts:
        for statement in sql.split_statements(text):
            try:
                spark.sql(statement)
            except Exception as e:
                raise MigrationError(f"view {path.name} failed: {e}") from e
        names.append(name)
    return names


def refresh_procedure_catalog(spark: Any, registry: Any) -> int:
    """Rewrite ``sys.procedure_catalog`` and ``sys.procedure_roles`` from the registry."""
    from pyspark.sql.types import BooleanType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("name", StringType()),
            StructField("signature", StringType()),
            StructField("returns", StringType()),
            StructField("description", StringType()),
            StructField("read_only", BooleanType()),
        ]
    )
    rows = [
        (
            p.qualified_name,
            p.signature(),
            ", ".join(f"{n} {t.upper()}" for n, t in p.returns),
            p.description,
            p.read_only,
        )
        for p in registry
    ]
    # DataFrame write: values are bound, never pasted into SQL text.
    spark.createDataFrame(rows, schema).writeTo("sys.procedure_catalog").overwritePartitions()
    roles = [(p.qualified_name, p.role) for p in registry]
    role_schema = StructType([StructField("name", StringType()), StructField("role", StringType())])
    spark.createDataFrame(roles, role_schema).writeTo("sys.procedure_roles").overwritePartitions()
    state_version.bump()
    return len(rows)
