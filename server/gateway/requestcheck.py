"""What a client may put in a request besides its statement.

OpenSession's ``configuration`` reaches Spark's session manager, which
applies ``set:hiveconf:…`` as settings, ``set:system:…`` as JVM system
properties and interpolates ``use:database`` into a ``USE`` statement; an
ExecuteStatement's ``confOverlay`` is applied as settings. With a password
file only an allow-list passes: the session settings any reader may change
(planauth.READER_SETTINGS), the fetch size Hive JDBC always sends, and
``use:database`` naming a database by a plain identifier (any role may
``USE`` any database: what it may do there is checked per statement).
"""

from __future__ import annotations

import re

from tierlake.server.exceptions import PermissionDeniedError
from tierlake.server.gateway import planauth

# Hive JDBC sends this in every OpenSession.
CLIENT_SETTINGS = frozenset({"hive.server2.thrift.resultset.default.fetch.size"})
# No backtracking: one optional quote, word characters, the same quote.
_DATABASE = re.compile(r"`?[A-Za-z0-9_]{1,128}`?")
_HIVECONF = "set:hiveconf:"


def _refuse(what: str) -> None:
    raise PermissionDeniedError(f"permission denied: {what} is not allowed in a session's configuration")


def check_configuration(configuration: dict) -> None:
    """Raise :class:`PermissionDeniedError` unless every key is allowed."""
    for key, value in configuration.items():
        if not isinstance(key, str) or not isinstance(value, str):
            _refuse("a non-string entry")
        lowered = key.lower()
        if lowered == "use:database":
            if not _DATABASE.fullmatch(value) or value.count("`") == 1:
                _refuse(f"use:database={value[:100]!r} (a database name)")
            continue
        if lowered.startswith(_HIVECONF):
            setting = lowered[len(_HIVECONF):]
            if setting in CLIENT_SETTINGS and value.strip().isdigit() and len(value) < 12:
                continue
            if setting in planauth.READER_SETTINGS:
                continue
        _refuse(f"{key[:100]!r}")


def check_overlay(overlay: dict) -> None:
    """An ExecuteStatement's ``confOverlay``: reader settings only."""
    for key, value in overlay.items():
        if not (isinstance(key, str) and isinstance(value, str)
                and key.lower() in planauth.READER_SETTINGS):
            raise PermissionDeniedError(f"permission denied: the setting {str(key)[:100]!r} "
                                        "is not allowed in a statement's confOverlay")
