"""The gateway's password file: users, their roles and salted password hashes.

One user per line, ``#`` comments::

    alice:admin:scrypt$16384$8$1$<salt base64>$<hash base64>
    feeder:writer:scrypt$...
    tiering-service:tiering-service:scrypt$...

Hashes are ``hashlib.scrypt`` with a random 16-byte salt per user
(``pbkdf2_sha256$<iterations>$<salt>$<hash>`` is accepted too, for files made
elsewhere). ``tierlake passwd`` writes the file (mode 0600, atomically); the
server re-reads it when it changes, so users and roles take effect without a
restart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from tierlake.server.exceptions import ConfigError
from tierlake.server.sqlapi.roles import ROLES

USER_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 16384, 8, 1
# Each check takes ~16 MB and ~50 ms of one core: unauthenticated clients
# opening many connections at once must queue, not exhaust memory.
CONCURRENT_CHECKS = 4
_B64 = base64.b64encode


@dataclass(frozen=True)
class User:
    name: str
    roles: frozenset[str]
    password_hash: str


def hash_password(password: str, salt: bytes | None = None) -> str:
    """A salted scrypt hash of ``password`` in the file's format."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_B64(salt).decode()}${_B64(digest).decode()}"


def verify_password(password: str, stored: str) -> bool:
    """True when ``password`` matches ``stored`` (constant-time comparison)."""
    parts = stored.split("$")
    try:
        if parts[0] == "scrypt" and len(parts) == 6:
            n, r, p = (int(x) for x in parts[1:4])
            salt, expected = base64.b64decode(parts[4]), base64.b64decode(parts[5])
            digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                                    dklen=len(expected), maxmem=256 * 1024 * 1024)
        elif parts[0] == "pbkdf2_sha256" and len(parts) == 4:
            salt, expected = base64.b64decode(parts[2]), base64.b64decode(parts[3])
            digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, int(parts[1]), len(expected))
        else:
            return False
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest, expected)


def parse_roles(text: str) -> frozenset[str]:
    roles = frozenset(r.strip() for r in text.split(",") if r.strip())
    unknown = roles - set(ROLES)
    if not roles or unknown:
        raise ConfigError(f"unknown role(s) {', '.join(sorted(unknown)) or '(none)'}; roles are {', '.join(ROLES)}")
    return roles


def parse(text: str, origin: str = "password file") -> dict[str, User]:
    users: dict[str, User] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        if len(parts) != 3 or not USER_NAME.match(parts[0]):
            raise ConfigError(f"{origin}:{lineno}: expected user:roles:hash")
        try:
            roles = parse_roles(parts[1])
        except ConfigError as e:
            raise ConfigError(f"{origin}:{lineno}: {e.message}") from None
        users[parts[0]] = User(parts[0], roles, parts[2])
    return users


def render(users: dict[str, User]) -> str:
    lines = ["# tierlake gateway users: user:roles:hash (edit with `tierlake passwd`)"]
    lines += [
        f"{u.name}:{','.join(sorted(u.roles))}:{u.password_hash}" for u in sorted(users.values(), key=lambda u: u.name)
    ]
    return "\n".join(lines) + "\n"


class PasswordFile:
    """A password file, re-read whenever its modification time or size changes."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._users: dict[str, User] = {}
        self._checks = threading.BoundedSemaphore(CONCURRENT_CHECKS)
        self.users()  # a missing or broken file fails at start, not at the first login

    def users(self) -> dict[str, User]:
        try:
            st = self.path.stat()
        except OSError as e:
            raise ConfigError(f"cannot read the password file {self.path}: {e.strerror}") from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            if stamp != self._stamp:
                self._users = parse(self.path.read_text(encoding="utf-8"), str(self.path))
                self._stamp = stamp
            return self._users

    def authenticate(self, user: str, password: str, checks: threading.Semaphore | None = None) -> bool:
        """Check ``user``'s password within a budget of concurrent checks: the
        gateway's own by default; another door (the HTTP port) passes its own,
        so a flood at that door cannot slow gateway logins (issue 51)."""
        entry = self.users().get(user)
        with checks or self._checks:
            if entry is None:
                # Same cost as a real check: response times do not reveal which users exist.
                verify_password(password, _DUMMY_HASH)
                return False
            return verify_password(password, entry.password_hash)

    def roles(self, user: str | None) -> frozenset[str]:
        entry = self.users().get(user or "")
        return entry.roles if entry else frozenset()


_DUMMY_HASH = hash_password("", salt=b"\0" * 16)


def set_user(path: str | Path, user: str, password: str | None, roles: frozenset[str] | None) -> User:
    """Add or change a user; ``None`` keeps the current password or roles."""
    if not USER_NAME.match(user):
        raise ConfigError(f"invalid user name {user!r}: use letters, digits and _ . @ -")
    path = Path(path).expanduser()
    users = parse(path.read_text(encoding="utf-8"), str(path)) if path.exists() else {}
    current = users.get(user)
    if current is None and (password is None or roles is None):
        raise ConfigError(f"new user {user} needs a password and --role")
    entry = User(
        user,
        roles if roles is not None else current.roles,
        hash_password(password) if password is not None else current.password_hash,
    )
    users[user] = entry
    _write(path, render(users))
    return entry


def delete_user(path: str | Path, user: str) -> bool:
    path = Path(path).expanduser()
    users = parse(path.read_text(encoding="utf-8"), str(path)) if path.exists() else {}
    if users.pop(user, None) is None:
        return False
    _write(path, render(users))
    return True


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".passwords-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp makes it 0600
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
