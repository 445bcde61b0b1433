"""The old import path of the UDF registry, kept for user extensions.

docs/functions.md told extensions ``from tierlake.server.runtime.functions import
functions``; the registry now lives beside the procedure registry
(:mod:`tierlake.server.sqlapi.functions`). This module is that module under its old
name (one registry, not a copy). Nothing in the tree imports it: it is the one
module exempt from the layer rule (``COMPAT_ALIASES`` in tests/test_architecture.py).
"""

import sys

from tierlake.server.sqlapi import functions as _functions

sys.modules[__name__] = _functions
