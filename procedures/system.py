"""System procedures: versions and introspection."""

from __future__ import annotations

from tierlake.server.metastore.database import metastore_db
from tierlake.server.sqlapi import registry
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.roles import READER
from tierlake.server.state import migrations


def tierlake_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tierlake")
    except PackageNotFoundError:
        return "0+unknown"


@registry.procedure(returns=[("component", "string"), ("version", "string")], role=READER, read_only=True)
def version(ctx: Context):
    """Versions of tierlake, Spark, Iceberg and the sys schema of this server."""
    jvm = ctx.spark.sparkContext._jvm
    try:
        iceberg = str(jvm.org.apache.iceberg.IcebergBuild.version())
    except Exception:  # noqa: BLE001 - a missing class means no Iceberg on the classpath
        iceberg = "unavailable"
    return [
        ("tierlake", tierlake_version()),
        ("spark", ctx.spark.version),
        ("iceberg", iceberg),
        ("schema", str(migrations.schema_version(ctx.spark))),
    ]


@registry.procedure(
    returns=[("name", "string"), ("signature", "string"), ("returns", "string"), ("doc", "string")],
    role=READER,
    read_only=True,
)
def describe_procedure(ctx: Context, name: str):
    """The full documentation of one procedure.

    Args:
      name: procedure name, with or without the ``sys.`` prefix
    """
    proc = (ctx.registry or registry.default).get(name)
    returns = ", ".join(f"{n} {t.upper()}" for n, t in proc.returns)
    return [(proc.qualified_name, proc.signature(), returns, proc.doc)]


@registry.procedure(returns=[("key", "string"), ("value", "string")], role=READER, read_only=True)
def server_info(ctx: Context):
    """Where this server's pieces are: JDBC URL, metastore, warehouse, workers, commit protocol.

    tierlake tiering-service processes read the metastore (the Thrift
    service's URI, or the shared database's JDBC URL, never its credentials)
    and the warehouse from here. commit_protocol says how Iceberg commits are
    serialised: the embedded metastore's compare-and-set, or Iceberg's
    metastore locks (a shared database or a remote metastore service).
    """
    conf = ctx.spark.sparkContext.getConf()
    db = metastore_db(ctx.config)
    remote = conf.get("spark.hadoop.hive.metastore.uris")
    if conf.get("spark.hadoop.iceberg.engine.hive.lock-enabled") == "false":
        protocol = "compare-and-set (the embedded metastore runs in this server)"
    else:
        where = f"the metastore service {remote}" if remote else f"shared database {db.display_url}"
        protocol = f"metastore locks ({where})"
    return [
        ("jdbc_url", ctx.jdbc_url),
        ("metastore_uri", ctx.metastore_uri),
        ("metastore_url", db.display_url if db.shared else None),
        ("warehouse", conf.get("spark.sql.warehouse.dir")),
        ("master", ctx.spark.sparkContext.master),
        ("tiering_workers", str(ctx.tiering_workers)),
        ("commit_protocol", protocol),
    ]
