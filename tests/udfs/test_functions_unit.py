"""The SQL function registry and the built-in UDFs' logic, without a JVM."""

from __future__ import annotations

import datetime as dt

import pytest

from tierlake.server.exceptions import InvalidArgumentError
from tierlake.server.sqlapi.functions import (
    FunctionRegistry,
    functions,
    parse_docstring,
)
from tierlake.udfs import BUILTIN_MODULES, load_builtins
from tierlake.udfs.durations import tierlake_duration_seconds
from tierlake.udfs.freshness import freshness_lag


def test_registry_records_a_documented_udf():
    reg = FunctionRegistry()

    @reg.udf(returns="double")
    def tierlake_test_half(x: float | None) -> float | None:
        """Half of x.

        Args:
          x: the number; NULL gives NULL.
        """
        return None if x is None else x / 2

    udf = reg.get("TIERLAKE_TEST_HALF")
    assert udf.signature() == "tierlake_test_half(x DOUBLE) → DOUBLE"
    assert udf.description == "Half of x."
    assert udf.params[0].description == "the number; NULL gives NULL."
    assert tierlake_test_half(4.0) == 2.0  # the decorator returns the function itself
    assert [u.name for u in reg] == ["tierlake_test_half"] and len(reg) == 1


def test_registry_refuses_undocumented_udfs():
    reg = FunctionRegistry()

    def no_doc(x: str) -> str:
        return x

    with pytest.raises(ValueError, match="no docstring"):
        reg.register(no_doc, returns="string")

    def undocumented_param(x: str, y: str) -> str:
        """Concatenate.

        Args:
          x: the first.
        """
        return x + y

    with pytest.raises(ValueError, match="parameter y is not documented"):
        reg.register(undocumented_param, returns="string")
    assert len(reg) == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "Bad-Name"}, "invalid function name"),
    ({"returns": "struct<a:int>"}, "unsupported return type"),
])
def test_registry_refuses_bad_names_and_types(kwargs, message):
    def fn(x: str) -> str:
        """Echo.

        Args:
          x: the value.
        """
        return x

    with pytest.raises(ValueError, match=message):
        FunctionRegistry().register(fn, **{"returns": "string", **kwargs})


def test_registry_refuses_unsupported_parameters_and_duplicates():
    reg = FunctionRegistry()

    def with_default(x: str = "a") -> str:
        """Echo.

        Args:
          x: the value.
        """
        return x

    with pytest.raises(ValueError, match="plain and required"):
        reg.register(with_default, returns="string")

    def listy(x: list) -> str:
        """Echo.

        Args:
          x: the value.
        """
        return str(x)

    with pytest.raises(TypeError, match="unsupported UDF parameter type"):
        reg.register(listy, returns="string")

    def echo(x: str) -> str:
        """Echo.

        Args:
          x: the value.
        """
        return x

    reg.register(echo, returns="string")
    with pytest.raises(ValueError, match="already registered"):
        reg.register(echo, returns="string")


def test_procedures_and_udfs_share_one_docstring_convention():
    from tierlake.server.sqlapi import registry

    assert registry.parse_docstring is parse_docstring
    doc = """Summary line.

    More text.

    Args:
      a: first
          continued here.
      b: second.
    Returns:
      nothing
    """
    assert parse_docstring(doc) == ("Summary line.", {"a": "first continued here.", "b": "second."})


def test_builtins_are_prefixed_and_registered_in_the_shared_registry():
    assert load_builtins() is functions
    names = {u.name for u in functions}
    assert {"tierlake_duration_seconds", "tierlake_freshness_lag"} <= names
    builtin_modules = set(BUILTIN_MODULES)
    for udf in functions:
        if udf.func.__module__ in builtin_modules:
            assert udf.name.startswith("tierlake_"), udf.name
    # Deterministic so that dashboards may aggregate it (Spark refuses
    # non-deterministic expressions inside max()).
    assert functions.get("tierlake_freshness_lag").deterministic is True


@pytest.mark.parametrize("text, seconds", [
    ("1 min", 60.0), ("30 s", 30.0), ("2h", 7200.0), ("500ms", 0.5), ("1500", 1.5), (" 1 d ", 86400.0),
    ("2 minutes", 120.0),
])
def test_duration_seconds(text, seconds):
    assert tierlake_duration_seconds(text) == seconds


def test_duration_seconds_null_and_bad_values():
    assert tierlake_duration_seconds(None) is None
    with pytest.raises(InvalidArgumentError, match="cannot parse 'soon' as a duration"):
        tierlake_duration_seconds("soon")


def test_freshness_lag():
    last = dt.datetime(2024, 1, 1, 12, 0, 0)
    now = last.timestamp()
    assert freshness_lag(last, "1 min", now + 30) == 0.0
    assert freshness_lag(last, "1 min", now + 90) == 30.0
    assert freshness_lag(None, "1 min", now) is None
    assert freshness_lag(last, None, now) is None
    with pytest.raises(InvalidArgumentError, match="'later'"):
        freshness_lag(last, "later", now)


def test_an_extension_registers_into_the_shared_registry(tmp_path, monkeypatch):
    from tierlake.server.app import load_extensions
    from tierlake.server.config.config import Config

    (tmp_path / "myco_udfs.py").write_text('''
from tierlake.server.sqlapi.functions import functions

@functions.udf(returns="double")
def myco_celsius(fahrenheit: float | None) -> float | None:
    """Degrees Celsius.

    Args:
      fahrenheit: the temperature in F; NULL gives NULL.
    """
    return None if fahrenheit is None else (fahrenheit - 32) * 5 / 9
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    config = Config.load(home=tmp_path / "home", conf={"tierlake.extensions": "myco_udfs"})
    try:
        assert load_extensions(config) == ["myco_udfs"]
        assert functions.get("myco_celsius").signature() == "myco_celsius(fahrenheit DOUBLE) → DOUBLE"
    finally:
        functions.unregister("myco_celsius")
        monkeypatch.delitem(__import__("sys").modules, "myco_udfs", raising=False)
