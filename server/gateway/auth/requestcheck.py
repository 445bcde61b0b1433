"""What a client may put in a request besides its statement.

OpenSession's ``configuration`` reaches Spark's session manager, which
applies ``set:hiveconf:…`` as settings, ``set:system:…`` as JVM system
properties and interpolates ``use:database`` into a ``USE`` statement; an
ExecuteStatement's ``confOverlay`` is applied as settings. With a password
file only an allow-list passes: the session settings any reader may change
(planauth.READER_SETTINGS, by key and value), the fetch size Hive JDBC always sends, and
``use:database`` naming a database by a plain identifier (any role may
``USE`` any database: what it may do there is checked per statement).
No key or value may hold ``${``: Hive's session set-up expands
``${env:…}``, ``${system:…}`` and ``${hiveconf:…}`` in them.

Every request but OpenSession names a session or an operation by its handle;
:func:`named_handle` says which, so that the gateway can refuse a handle that
is not the caller's own before anything reaches Spark (Spark's session
manager is one for all connections: it would serve any handle it knows).
"""

from __future__ import annotations

import re
from typing import Any

from tierlake.server.exceptions import PermissionDeniedError
from tierlake.server.gateway.auth import planauth

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
        if planauth.SUBSTITUTION in key or planauth.SUBSTITUTION in value:
            raise planauth.substitution_refused("a session's configuration")
        lowered = key.lower()
        if lowered == "use:database":
            if not _DATABASE.fullmatch(value) or value.count("`") == 1:
                _refuse(f"use:database={value[:100]!r} (a database name)")
            continue
        if lowered.startswith(_HIVECONF):
            setting = lowered[len(_HIVECONF):]
            if setting in CLIENT_SETTINGS and value.strip().isdigit() and len(value) < 12:
                continue
            if planauth.reader_may_set(setting, value):
                continue
        _refuse(f"{key[:100]!r}")


def check_overlay(overlay: dict) -> None:
    """An ExecuteStatement's ``confOverlay``: reader settings only."""
    for key, value in overlay.items():
        if isinstance(key, str) and isinstance(value, str) and planauth.SUBSTITUTION in key + value:
            raise planauth.substitution_refused("a statement's confOverlay")
        if not (isinstance(key, str) and isinstance(value, str) and planauth.reader_may_set(key, value)):
            raise PermissionDeniedError(f"permission denied: the setting {str(key)[:100]!r} "
                                        "is not allowed in a statement's confOverlay")


SESSION = "SessionHandle"
OPERATION = "OperationHandle"
# The one request that names no handle: it makes one.
NAMES_NO_HANDLE = frozenset({"OpenSession"})


def named_handle(args: Any) -> tuple[str, Any] | None:
    """``(SESSION or OPERATION, THandleIdentifier or None)`` for a decoded
    request (the stubs' ``<Method>_args`` or rawmethods' structs), or None
    when its request struct has no handle field at all.

    The field is found by its name on the request, not by a list of methods:
    a method added to the stubs later is covered without anyone remembering
    to add it here.
    """
    req = getattr(args, "req", args)  # rawmethods' structs are flat
    for kind, attribute in ((OPERATION, "operationHandle"), (OPERATION, "operation_handle"),
                            (SESSION, "sessionHandle"), (SESSION, "session_handle")):
        if hasattr(req, attribute):
            handle = getattr(req, attribute)
            return kind, getattr(handle, "sessionId" if kind == SESSION else "operationId", None)
    return None
