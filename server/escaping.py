"""One way to write text a client chose into anything an operator reads
(issue 51): log lines, ``last_error`` in ``sys.lake_tiering_status``, the
status page, metrics labels.

A client chooses a lot of what the server writes down: table and column
names (back-quoted names may hold any character), change types and other
values that fail a round, setting keys, statement text. Written as it is, a
newline forges a whole log line (timestamp, level, "user … granted admin"),
an ANSI escape sequence rewrites an operator's terminal, and a bidi override
(U+202E) makes a name read backwards. :func:`printable` writes every
character that is not printable — controls (Cc), format characters (Cf:
bidi marks, zero-width characters), line and paragraph separators (Zl,
Zp), other spaces than U+0020 — as a Python-style escape (``\\n``,
``\\x1b``, ``\\u202e``); everything else, letters of any script included,
stays as it is.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object, keep: str = "") -> str:
    """``text`` (``str()`` of it) with every non-printable character escaped,
    except those in ``keep`` (a log record keeps the newlines between the
    lines of a traceback, see log_setup.py)."""
    text = "" if text is None else str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in keep else _escape(ch) for ch in text)
