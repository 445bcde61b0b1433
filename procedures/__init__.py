"""Stored procedures: ``CALL sys.<name>(...)`` implemented in Python.

Each module registers its family of procedures with
:data:`tierlake.server.sqlapi.registry.default` on import, exactly as a user
extension would; ``BUILTIN_MODULES`` lists the built-in ones. User extensions
are modules named in the ``tierlake.extensions`` setting. A procedure checks
its arguments, calls the engine and returns rows.
"""

from __future__ import annotations

import importlib

from tierlake.server.sqlapi import registry

BUILTIN_MODULES = ["tierlake.procedures.system", "tierlake.procedures.tiering", "tierlake.procedures.tables",
                   "tierlake.procedures.kv_snapshots", "tierlake.procedures.leases", "tierlake.procedures.quality",
                   "tierlake.procedures.stream",
                   "tierlake.procedures.maintenance"]


def load_builtins() -> registry.Registry:
    """Import the built-in procedure modules (they register on import); the default registry."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    return registry.default
