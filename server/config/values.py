"""One parser of the value kinds settings and table properties share: ``int``, ``duration``, ``bool``, ``choice``.

:meth:`tierlake.server.config.settings.Setting.parse` and the table-property
registry (:mod:`tierlake.server.catalog.properties`: ``validate`` and ``read``)
both call :func:`parse`; where they differ, a :class:`Kind` option says so::

    parse("8", Kind("int", minimum=1))                          # 8
    parse("yes", Kind("bool", true_words=("true", "yes")))      # True
    parse("5", Kind("duration", unit_required=True))            # BadValue: NEEDS_UNIT

A value that is not one raises :class:`BadValue`, a neutral error carrying a
reason code (the constants below); each registry turns it into its own
message (settings: ``ConfigError``; properties: ``InvalidArgumentError``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tierlake.server.config.durations import parse_duration
from tierlake.server.exceptions import InvalidArgumentError

KINDS = ("int", "duration", "bool", "choice")

# Why a value is refused (BadValue.reason).
EMPTY = "empty"  # nothing but spaces, and the kind is not optional
NOT_AN_INTEGER = "not-an-integer"
BELOW_MINIMUM = "below-minimum"
ABOVE_MAXIMUM = "above-maximum"
NOT_A_DURATION = "not-a-duration"  # BadValue.detail: parse_duration's message (with examples)
NEEDS_UNIT = "needs-a-unit"  # a bare number other than '0' where a unit is required
SHORTER_THAN_MINIMUM = "shorter-than-minimum"
NOT_A_BOOL = "not-a-bool"
NOT_A_CHOICE = "not-a-choice"

_LETTER = re.compile(r"[a-zA-Z]")


@dataclass(frozen=True)
class Kind:
    """A value kind and the options its readers differ in."""

    type: str  # one of KINDS
    optional: bool = False  # an empty (or all-space) value is None rather than refused
    minimum: int | None = None  # int: the smallest value allowed
    maximum: int | None = None  # int: the largest value allowed
    unit_required: bool = False  # duration: a bare number (Fluss: milliseconds) is refused, except '0'
    min_seconds: float | None = None  # duration: the shortest value allowed
    true_words: tuple[str, ...] = ("true",)  # bool: the words (lower case) read as true …
    false_words: tuple[str, ...] = ("false",)  # … and as false; any other is refused
    choices: tuple[str, ...] = ()  # choice: the canonical spellings, matched without regard to case


class BadValue(ValueError):
    """``text`` is not a value of its kind: ``reason`` (a constant of this module) says why.

    ``value`` is what was read before a bound refused it (an int, a timedelta);
    ``detail`` a neutral sentence (for durations: the parser's, naming ``name``).
    """

    def __init__(self, reason: str, text: str, value: Any = None, detail: str = ""):
        super().__init__(detail or f"{reason}: {text!r}")
        self.reason = reason
        self.text = text
        self.value = value
        self.detail = detail or f"{reason}: {text!r}"


def parse(text: str, kind: Kind, name: str = "value") -> Any:
    """The typed value of ``text`` (surrounding spaces ignored): an int, a
    ``timedelta``, a bool or the canonical choice; ``None`` for an empty
    optional one. :class:`BadValue` if it is not one; ``name`` is what the
    duration parser's message names."""
    if not text.strip():
        if kind.optional:
            return None
        try:
            _PARSERS[kind.type](text, kind, name)
        except BadValue as bad:  # refused as empty, with what its kind's parser says of it
            raise BadValue(EMPTY, text, detail=bad.detail) from None
        raise BadValue(EMPTY, text)
    return _PARSERS[kind.type](text, kind, name)


def _int(text: str, kind: Kind, name: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise BadValue(NOT_AN_INTEGER, text) from None
    if kind.minimum is not None and number < kind.minimum:
        raise BadValue(BELOW_MINIMUM, text, number)
    if kind.maximum is not None and number > kind.maximum:
        raise BadValue(ABOVE_MAXIMUM, text, number)
    return number


def _duration(text: str, kind: Kind, name: str) -> timedelta:
    try:
        duration = parse_duration(text, name)
    except InvalidArgumentError as e:
        raise BadValue(NOT_A_DURATION, text, detail=e.message) from None
    if kind.unit_required and text.strip() != "0" and not _LETTER.search(text):
        raise BadValue(NEEDS_UNIT, text, duration)
    if kind.min_seconds is not None and duration.total_seconds() < kind.min_seconds:
        raise BadValue(SHORTER_THAN_MINIMUM, text, duration)
    return duration


def _bool(text: str, kind: Kind, name: str) -> bool:
    word = text.strip().lower()
    if word in kind.true_words:
        return True
    if word in kind.false_words:
        return False
    raise BadValue(NOT_A_BOOL, text)


def _choice(text: str, kind: Kind, name: str) -> str:
    word = text.strip()
    for choice in kind.choices:
        # The text is folded to the case the choice is spelled in (settings spell
        # theirs in upper case, table properties in lower case).
        if (word.upper() == choice) if choice.upper() == choice else (word.lower() == choice.lower()):
            return choice
    raise BadValue(NOT_A_CHOICE, text)


_PARSERS = {"int": _int, "duration": _duration, "bool": _bool, "choice": _choice}
