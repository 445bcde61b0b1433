"""The one parser of value kinds settings and table properties share (server/config/values.py), no JVM.

Golden cases, one a line: ``kind [options] | text | expected``; text is as
written, or a quoted Python literal (spaces at its edges, look-alike letters); expected
is a Python expression for the value (``timedelta`` in scope) or ``!reason``
for a refusal. Options: ``optional``, ``unit`` (a duration needs a unit),
``min=N``, ``max=N``, ``min_s=X``, ``words=setting`` (yes/no/on/off/1/0 too),
``choices=A/B``.
"""

from __future__ import annotations

import ast
import re
from datetime import timedelta

import pytest

from tierlake.server.catalog import properties
from tierlake.server.config import settings, values
from tierlake.server.config.values import BadValue, Kind, parse
from tierlake.server.exceptions import ConfigError, InvalidArgumentError

GOLDEN = r"""
# ---- int ----------------------------------------------------------------------
int                    | 42           | 42
int                    | ' 7 '        | 7
int                    | -3           | -3
int                    | +3           | 3
int                    | 1_000        | 1000
int                    | 4.0          | !not-an-integer
int                    | two          | !not-an-integer
int                    | 1e3          | !not-an-integer
int min=0              | 0            | 0
int min=0              | -1           | !below-minimum
int min=1 max=1024     | 1024         | 1024
int min=1 max=1024     | 1025         | !above-maximum
int min=1 max=1024     | 0            | !below-minimum
int max=3              | -50          | -50
# ---- duration: a bare number is milliseconds unless a unit is required --------
duration               | 30 s         | timedelta(seconds=30)
duration               | ' 1 min '    | timedelta(minutes=1)
duration               | 2h           | timedelta(hours=2)
duration               | 500          | timedelta(milliseconds=500)
duration               | 0            | timedelta(0)
duration               | soon         | !not-a-duration
duration               | 1 fortnight  | !not-a-duration
duration               | -1 s         | !not-a-duration
duration unit          | 5            | !needs-a-unit
duration unit          | 0.0          | !needs-a-unit
duration unit          | 00           | !needs-a-unit
duration unit          | 0            | timedelta(0)
duration unit          | 5 ms         | timedelta(milliseconds=5)
duration unit          | soon         | !not-a-duration
duration unit min_s=1  | 1 s          | timedelta(seconds=1)
duration unit min_s=1  | 999 ms       | !shorter-than-minimum
duration unit min_s=1  | 0 s          | !shorter-than-minimum
duration unit min_s=1  | 0            | !shorter-than-minimum
# ---- bool: a table property's only true/false, a setting's yes/no/on/off/1/0 too
bool                   | true         | True
bool                   | FALSE        | False
bool                   | '\tTrue '    | True
bool                   | yes          | !not-a-bool
bool                   | 1            | !not-a-bool
bool words=setting     | yes          | True
bool words=setting     | On           | True
bool words=setting     | 1            | True
bool words=setting     | off          | False
bool words=setting     | NO           | False
bool words=setting     | 0            | False
bool words=setting     | sometimes    | !not-a-bool
# ---- choice: without regard to case, the canonical spelling back ------------
choice choices=PLAIN/NOSASL   | plain      | 'PLAIN'
choice choices=PLAIN/NOSASL   | NoSasl     | 'NOSASL'
choice choices=PLAIN/NOSASL   | KERBEROS   | !not-a-choice
choice choices=off/warn/block | Block      | 'block'
choice choices=off/warn/block | WARN       | 'warn'
choice choices=off/warn/block | strict     | !not-a-choice
# the text is folded to the case the choice is spelled in (as each registry always did)
choice choices=PLAIN/NOSASL   | 'no\u017fasl' | 'NOSASL'
choice choices=PLAIN/NOSASL   | 'pla\u0131n'  | 'PLAIN'
choice choices=off/warn/block | 'o\ufb00'     | !not-a-choice
choice choices=off/warn/block | 'bloc\u212a'  | 'block'
# ---- empty: None when optional, else refused whatever the kind ----------------
int optional           |              | None
int optional           | '  '         | None
duration optional      |              | None
bool optional          |              | None
choice optional choices=A/B |         | None
int                    |              | !empty
int                    | ' \t '      | !empty
int min=1              |              | !empty
duration unit          |              | !empty
bool words=setting     |              | !empty
choice choices=A/B     |              | !empty
"""


def _kind(spec: str) -> Kind:
    type_, *options = spec.split()
    kw: dict = {}
    for option in options:
        name, _, arg = option.partition("=")
        if name == "optional":
            kw["optional"] = True
        elif name == "unit":
            kw["unit_required"] = True
        elif name in ("min", "max"):
            kw["minimum" if name == "min" else "maximum"] = int(arg)
        elif name == "min_s":
            kw["min_seconds"] = float(arg)
        elif name == "words":
            assert arg == "setting"
            flag = settings.lookup("tierlake.gateway.status-cache").kind
            kw["true_words"], kw["false_words"] = flag.true_words, flag.false_words
        elif name == "choices":
            kw["choices"] = tuple(arg.split("/"))
        else:
            raise AssertionError(f"unknown option {option!r}")
    return Kind(type_, **kw)


def _cases() -> list[tuple[str, str, str]]:
    cases = []
    for line in GOLDEN.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        spec, text, expected = (part.strip() for part in line.split("|"))
        if text.startswith("'"):  # a Python literal: spaces at the edges, look-alike letters
            text = ast.literal_eval(text)
        cases.append((spec, text, expected))
    return cases


CASES = _cases()


@pytest.mark.parametrize("spec, text, expected", CASES, ids=[f"{s}|{t!r}" for s, t, _ in CASES])
def test_golden(spec, text, expected):
    kind = _kind(spec)
    if expected.startswith("!"):
        with pytest.raises(BadValue) as info:
            parse(text, kind, "k")
        assert info.value.reason == expected[1:]
        assert info.value.text == text
    else:
        value = parse(text, kind, "k")
        want = eval(expected, {"timedelta": timedelta})  # the golden table above, nothing else
        assert value == want and type(value) is type(want)


def test_every_reason_has_a_golden_refusal_and_every_kind_a_golden_value():
    reasons = {value for name, value in vars(values).items() if name.isupper() and isinstance(value, str)
               and name != "KINDS" and not name.startswith("_")}
    refused = {expected[1:] for _, _, expected in CASES if expected.startswith("!")}
    assert refused == reasons
    assert {spec.split()[0] for spec, _, expected in CASES if not expected.startswith("!")} == set(values.KINDS)


def test_a_refusal_carries_what_was_read_and_the_duration_parsers_message():
    with pytest.raises(BadValue) as info:
        parse("0", Kind("int", minimum=1))
    assert info.value.value == 0
    with pytest.raises(BadValue) as info:
        parse("500 ms", Kind("duration", min_seconds=1))
    assert info.value.value == timedelta(milliseconds=500)
    with pytest.raises(BadValue) as info:
        parse("soon", Kind("duration"), "table.log.ttl")
    assert info.value.detail == ("table.log.ttl: cannot parse 'soon' as a duration "
                                 "(examples: '30 s', '1 min', '2 h', '500 ms')")
    # An empty value is reported as empty, with what its kind's parser says of it.
    with pytest.raises(BadValue) as info:
        parse("  ", Kind("duration"), "x")
    assert (info.value.reason, info.value.detail) == (values.EMPTY, "x: cannot parse '  ' as a duration "
                                                                    "(examples: '30 s', '1 min', '2 h', '500 ms')")
    assert isinstance(info.value, ValueError)


# ---- both registries read through it ------------------------------------------

def test_the_registries_describe_their_differences_as_options():
    workers = settings.lookup("tierlake.tiering.workers").kind
    assert (workers.type, workers.minimum, workers.optional) == ("int", 0, False)
    assert settings.lookup("tierlake.http.port").kind.optional  # no default: empty is off
    assert "yes" in settings.lookup("tierlake.gateway.status-cache").kind.true_words
    freshness = properties.lookup(properties.FRESHNESS_PROPERTY).kind
    assert (freshness.unit_required, freshness.min_seconds, freshness.optional) == (True, 1, False)
    assert properties.lookup(properties.ENABLED).kind.true_words == ("true",)
    buckets = properties.lookup(properties.BUCKETS).kind
    assert (buckets.minimum, buckets.maximum) == (1, 1024)


@pytest.mark.parametrize("key, raw, message", [
    ("tierlake.tiering.workers", " two ", "tierlake.tiering.workers must be an integer, got ' two '"),
    ("tierlake.tiering.workers", "-1", "tierlake.tiering.workers must be at least 0, got -1"),
    ("tierlake.tiering.workers", " ", "tierlake.tiering.workers needs a value (an integer)"),
    ("tierlake.coordinator.interval", "soon", "tierlake.coordinator.interval: cannot parse 'soon' as a duration"),
    ("tierlake.coordinator.interval", "", "tierlake.coordinator.interval needs a value (a duration such as '30 s')"),
    ("tierlake.gateway.status-cache", "maybe", "tierlake.gateway.status-cache must be true or false, got 'maybe'"),
    ("tierlake.gateway.auth", "KERBEROS", "tierlake.gateway.auth must be one of PLAIN, NOSASL, got 'KERBEROS'"),
])
def test_a_setting_maps_each_reason_to_its_message(key, raw, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        settings.lookup(key).parse(raw)


@pytest.mark.parametrize("key, raw, value", [
    ("tierlake.gateway.auth", "", "PLAIN"),  # an empty choice is its default
    ("tierlake.gateway.auth", " nosasl ", "NOSASL"),
    ("tierlake.http.port", "", None),
    ("tierlake.gateway.status-cache", "off", False),
    ("tierlake.query.timeout", "250", timedelta(milliseconds=250)),  # a setting's bare number: ms
])
def test_a_setting_reads_through_the_shared_parser(key, raw, value):
    assert settings.lookup(key).parse(raw) == value


@pytest.mark.parametrize("key, raw, why", [
    (properties.BUCKETS, "2000", "out of range; expected a whole number from 1 to 1024"),
    (properties.FRESHNESS_PROPERTY, "90", "a duration needs a unit (ms, s, min, h, d); expected"),
    (properties.FRESHNESS_PROPERTY, "10 ms", "shorter than the minimum; expected"),
    (properties.AUTO_COMPACTION, "on", ": expected 'true' or 'false'"),
    (properties.QUALITY, " ", ": empty; expected one of 'off', 'warn', 'block'"),
])
def test_a_property_maps_each_reason_to_its_message(key, raw, why):
    with pytest.raises(InvalidArgumentError) as info:
        properties.validate({key: raw})
    assert info.value.message.startswith(f"invalid value {raw!r} for table property '{key}': ")
    assert why in info.value.message


def test_reading_a_stored_property_is_lenient_as_it_always_was():
    P = properties
    assert P.read({P.BUCKETS: " 5000 "}, P.BUCKETS) == 5000  # no bounds when reading
    assert P.read({P.LOG_TTL: "5"}, P.LOG_TTL) == timedelta(milliseconds=5)  # a bare number: ms
    assert P.read({P.AUTO_COMPACTION: " TRUE"}, P.AUTO_COMPACTION) is True
    assert P.read({P.AUTO_COMPACTION: "yes"}, P.AUTO_COMPACTION) is False  # only 'true' is on
    assert P.read({P.LOG_START_PROPERTY: "12"}, P.LOG_START_PROPERTY) == 12  # a position is an int
    assert P.read({P.QUALITY: "Warn"}, P.QUALITY) == "Warn"  # a choice is its text
    with pytest.raises(InvalidArgumentError, match=r"^'bucket\.num' must be a whole number, got 'x'$"):
        P.read({P.BUCKETS: "x"}, P.BUCKETS)
    with pytest.raises(InvalidArgumentError, match=r"^table\.log\.ttl: cannot parse 'soon' as a duration"):
        P.read({P.LOG_TTL: "soon"}, P.LOG_TTL)
