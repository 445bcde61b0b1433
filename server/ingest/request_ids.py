"""Request ids (docs/ingest.md, 'Request ids: retries that never duplicate').

A client names its next write with the session setting
``tierlake.write.request-id``. The gateway keeps the value itself (never in
Spark's session conf): it is checked when SET (:func:`check_request_id`),
applies to the session's next statement other than a SET or RESET and is
gone after it, whatever that statement was and however it ended.

A write is recorded under a *key*, not the id: a keyed hash of the user and
the id (:class:`RequestKeys`), with a secret of the server's kept in
``$TIERLAKE_HOME/secrets/request-ids.key``. So ids are scoped by user (the
committer scopes them by table), and a reader of a stream table's
``.snapshots`` summaries or of ``sys.write_requests`` sees keys it cannot
turn back into ids.

:func:`tagged` makes a statement's key current on its thread for writes
made deeper down (an atomic CTAS, server/tiering/ctas.py), :func:`current_key`.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import os
import secrets
import threading
import unicodedata
from pathlib import Path

from tierlake.server.catalog.properties import WRITE_REQUEST_ID
from tierlake.server.config import settings
from tierlake.server.exceptions import InvalidRequestIdError, UnknownSettingError

REQUEST_ID = WRITE_REQUEST_ID
MAX_LENGTH = 256
# Unicode categories refused in an id: controls (U+0000-U+001F, U+007F-U+009F: U+0085 is one), formats
# (bidi overrides such as U+202E, zero-width characters), line and paragraph separators (U+2028, U+2029).
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
# The tierlake.* settings a session may SET (the gateway answers them; nothing reaches Spark's conf).
SESSION_SETTINGS = (REQUEST_ID,)
PREFIX = "tierlake."
SECRET_FILE = Path("secrets") / "request-ids.key"


def check_request_id(value: str) -> None:
    """Raise :class:`InvalidRequestIdError` unless ``value`` may be a request id."""
    if len(value) > MAX_LENGTH:
        raise InvalidRequestIdError(
            f"SET {REQUEST_ID} refused: {len(value)} characters, at most {MAX_LENGTH} are allowed. "
            "The setting is unchanged")
    for at, ch in enumerate(value):
        category = unicodedata.category(ch)
        if category in REFUSED_CATEGORIES:
            raise InvalidRequestIdError(
                f"SET {REQUEST_ID} refused: character U+{ord(ch):04X} at position {at + 1} is a control, format, "
                f"line or paragraph separator character (Unicode category {category}); use printable characters "
                "and spaces. The setting is unchanged")


def is_tierlake_key(key: str | None) -> bool:
    return key is not None and key.strip().lower().startswith(PREFIX)


def check_session_key(key: str) -> str:
    """The session setting ``key`` names (lower-cased), or :class:`UnknownSettingError` with a did-you-mean."""
    lowered = key.strip().lower()
    if lowered in SESSION_SETTINGS:
        return lowered
    if lowered in settings.BY_KEY:
        raise UnknownSettingError(
            f"SET {key} refused: {lowered} is a server setting (tierlake.conf or --conf at start), not a session "
            f"setting; the tierlake.* session settings are: {', '.join(SESSION_SETTINGS)}")
    close = difflib.get_close_matches(lowered, list(SESSION_SETTINGS) + list(settings.BY_KEY), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UnknownSettingError(
        f"SET {key} refused: unknown tierlake setting {lowered}{hint} (the tierlake.* session settings are: "
        f"{', '.join(SESSION_SETTINGS)}; server settings are listed in docs/configuration.md)")


class RequestKeys:
    """The key a request id is recorded under: HMAC-SHA256 of (user, id) with the server's secret."""

    def __init__(self, secret: bytes):
        self._secret = secret

    @classmethod
    def load(cls, home: str | os.PathLike) -> RequestKeys:
        """The secret of ``home``, made at the first start (0600, in a 0700 directory)."""
        path = Path(home) / SECRET_FILE
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            text = path.read_text().strip()
            if len(text) < 32:
                raise InvalidRequestIdError(f"{path} is not a request-id secret (delete it to make a new one: "
                                            "ids recorded before are then forgotten)") from None
            return cls(bytes.fromhex(text))
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        return cls(bytes.fromhex(path.read_text().strip()))

    def key(self, user: str | None, request_id: str) -> str:
        user = user or ""
        message = f"{len(user)}:{user}\x00{request_id}".encode("utf-8", "surrogatepass")
        return "k1:" + hmac.new(self._secret, message, hashlib.sha256).hexdigest()[:40]


_current = threading.local()


class tagged:
    """``with tagged(key):`` makes ``key`` the request key of the statement running on this thread."""

    def __init__(self, key: str | None):
        self.key = key

    def __enter__(self) -> str | None:
        self._previous = getattr(_current, "key", None)
        _current.key = self.key
        return self.key

    def __exit__(self, *exc_info) -> None:
        _current.key = self._previous


def current_key() -> str | None:
    """The request key of the statement running on this thread (None: untagged)."""
    return getattr(_current, "key", None)
