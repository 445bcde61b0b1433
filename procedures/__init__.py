"""Stored procedures: ``CALL sys.<name>(...)`` implemented in Python.

Each module registers its family of procedures with
:data:`procedures.registry.registry` on import; ``BUILTIN_MODULES`` lists the
built-in ones. User extensions are modules named in the ``tierlake.extensions``
setting and register the same way.
"""

BUILTIN_MODULES = ["tierlake.procedures.system", "tierlake.procedures.tiering", "tierlake.procedures.tables", "tierlake.procedures.kv_snapshots",
                   "tierlake.procedures.leases", "tierlake.procedures.quality"]
