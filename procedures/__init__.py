"""Stored procedures: ``CALL sys.<name>(...)`` implemented in Python.

Each module registers its family of procedures with
:data:`procedures.registry.registry` on import; ``BUILTIN_MODULES`` lists the
built-in ones. User extensions are modules named in the ``tierlake.extensions``
setting and register the same way.
"""

BUILTIN_MODULES = ["procedures.system", "procedures.tiering", "procedures.tables", "procedures.kv_snapshots",
                   "procedures.leases", "procedures.quality"]
