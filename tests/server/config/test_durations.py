"""Durations as users write them in table properties, settings and procedure arguments."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tierlake.server.config.durations import parse_duration
from tierlake.server.exceptions import InvalidArgumentError


@pytest.mark.parametrize("text, expected", [
    ("1 min", timedelta(minutes=1)), ("  30 s ", timedelta(seconds=30)), ("500", timedelta(milliseconds=500)),
    ("2h", timedelta(hours=2)), ("1.5 days", timedelta(days=1.5)), ("10\tms", timedelta(milliseconds=10)),
])
def test_parses_what_users_write(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "1 fortnight", "-1 s", "1 s x", "1" + " " * 50 + "s!"])
def test_refuses_the_rest_with_examples(text):
    with pytest.raises(InvalidArgumentError, match="examples"):
        parse_duration(text)


@pytest.mark.timeout(60)
def test_a_long_run_of_spaces_is_refused_at_once():
    # The old pattern (^\s*…\s*([a-zA-Z]*)\s*$) split a run of spaces between its
    # \s* in quadratically many ways before failing (8,000 spaces: 0.24 s); a
    # million would hold the GIL for hours. Linear, it is a few tens of ms.
    with pytest.raises(InvalidArgumentError, match="examples"):
        parse_duration("1" + " " * 1_000_000 + "x!")
