"""Who may call what: the gateway's roles.

Roles (a user holds one or more, from the gateway's password file):

- ``reader``: queries (SELECT, SHOW, DESCRIBE, EXPLAIN, USE, SET) and
  read-only procedures;
- ``writer``: a reader that may also change rows (INSERT, MERGE, UPDATE,
  DELETE) of tables outside ``sys`` — the data engineer feeding stream tables;
- ``admin``: everything, including DDL and every state-changing procedure
  except the tiering service's own;
- ``tiering-service``: a reader that may also speak the tiering protocol
  (``sys.heartbeat`` and the lease procedures). Nobody else may: a stray
  heartbeat or lease release changes what the tiering jobs do. A user who
  needs both holds both roles.

A procedure declares the role it needs where it is registered
(``@registry.procedure(..., role=READER)``); one that declares none needs
``admin``, so a forgotten role never opens access.
"""

from __future__ import annotations

READER = "reader"
WRITER = "writer"
ADMIN = "admin"
TIERING = "tiering-service"

ROLES = (READER, WRITER, ADMIN, TIERING)

# Which held roles satisfy a required role.
GRANTED_BY: dict[str, frozenset[str]] = {
    READER: frozenset(ROLES),
    WRITER: frozenset({WRITER, ADMIN}),
    ADMIN: frozenset({ADMIN}),
    TIERING: frozenset({TIERING}),
}


def check_role(role: str) -> str:
    """``role`` if it is a known role, else :class:`ValueError`."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    return role


def allows(held: frozenset[str] | set[str], required: str) -> bool:
    return bool(GRANTED_BY[required] & set(held))
