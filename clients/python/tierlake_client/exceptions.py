"""The root of tierlake's one exception hierarchy.

The server's ``tierlake.server.exceptions`` derives every error from
:class:`TierlakeError` defined here, so an error raised by the client (a bad
URL, a failed TLS handshake, an unreadable password file) and one the server
raises are caught by the same ``except TierlakeError``.
"""

from __future__ import annotations


class TierlakeError(Exception):
    """Base class. ``sqlstate`` follows the SQL standard classes."""

    sqlstate = "XX000"
    error_code = 1000

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ConfigError(TierlakeError):
    """Bad configuration (file, ``--conf``, environment, connection URL)."""

    sqlstate = "F0000"
    error_code = 1001
