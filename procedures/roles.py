"""Who may call which procedure: the one table of procedure roles.

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

Every procedure must have an entry in :data:`PROCEDURE_ROLES` (a unit test
fails otherwise); at run time a procedure without one needs ``admin``, so a
forgotten entry never opens access. Extensions give their procedures a role
with :func:`assign`. Names not (yet) registered may appear here.
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

PROCEDURE_ROLES: dict[str, str] = {
    # introspection
    "version": READER,
    "describe_procedure": READER,
    "server_info": READER,
    "list_tiering_statuses": READER,
    "tiering_job_status": READER,
    # the tiering protocol
    "heartbeat": TIERING,
    "acquire_lease": TIERING,
    "release_lease": TIERING,
    "drop_lease": TIERING,
    # administration
    "enable_tiering": ADMIN,
    "disable_tiering": ADMIN,
    "retry_tiering": ADMIN,
    "create_table_as": ADMIN,
    # KV snapshots and log retention change what can be rebuilt from the stream
    "kv_snapshot": ADMIN,
    "expire_kv_snapshots": ADMIN,
    "apply_log_retention": ADMIN,
    # data quality: a run only records results; the suite decides what block mode publishes
    "validate": WRITER,
    "add_expectation": ADMIN,
    "drop_expectation": ADMIN,
}


def assign(name: str, role: str) -> None:
    """Give procedure ``sys.<name>`` a role (for extension modules)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    PROCEDURE_ROLES[name.lower()] = role


def procedure_role(name: str) -> str:
    """The role ``sys.<name>`` needs; ``admin`` when it has no entry."""
    key = name.lower()
    if key.startswith("sys."):
        key = key[4:]
    return PROCEDURE_ROLES.get(key, ADMIN)


def allows(held: frozenset[str] | set[str], required: str) -> bool:
    return bool(GRANTED_BY[required] & set(held))
