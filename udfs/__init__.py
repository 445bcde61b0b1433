"""SQL functions (Python UDFs) every session of the server can call.

Each module registers its functions with
:data:`tierlake.server.sqlapi.functions.functions` on import;
``BUILTIN_MODULES`` lists the built-in ones. User extensions (modules named
in the ``tierlake.extensions`` setting) register the same way. The server
registers them into the driver's SparkSession at start and into every JDBC
session the gateway opens (each is its own ``SparkSession.newSession()``,
which would not see them otherwise). Sys views never call them. Names start
with ``tierlake_`` so they never shadow a Spark built-in.
"""

import importlib

from tierlake.server.sqlapi.functions import functions

BUILTIN_MODULES = ["tierlake.udfs.durations", "tierlake.udfs.freshness"]


def load_builtins():
    """Import the built-in UDF modules (they register on import); the registry."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    return functions
