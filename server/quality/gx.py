"""Great Expectations, imported lazily and kept quiet.

GX costs about 3 s to import and is an optional feature: nothing imports it
until a table is validated or an expectation is added. It runs with an
ephemeral in-memory context (no project directory, no stores on disk), with
analytics off (set in the environment before the import, and in the
context's config) and progress bars off, so a server never calls out to the
network or writes to its console because of it.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

from tierlake.server.exceptions import InvalidArgumentError, MissingDependencyError

INSTALL_HINT = ("data quality needs Great Expectations 1.x, which is not installed; "
                "install it with: pip install 'great-expectations>=1.0,<2'")
# Arguments GX sets itself, or that would change how results are reported.
_RESERVED_KWARGS = {"id", "batch_id", "rendered_content", "result_format", "catch_exceptions", "meta"}
_lock = threading.Lock()
_state: dict[str, Any] = {}


def load() -> Any:
    """The ``great_expectations`` module, imported once with analytics off."""
    if "gx" in _state:
        return _state["gx"]
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    try:
        import great_expectations as gx
    except ImportError as e:
        raise MissingDependencyError(f"{INSTALL_HINT} ({e})") from None
    _state["gx"] = gx
    return gx


def snake_name(name: str) -> str:
    """``ExpectColumnValuesToBeUnique`` → ``expect_column_values_to_be_unique``."""
    name = name.strip()
    if "_" in name or name.islower():
        return name.lower()
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def expectation_class(name: str) -> tuple[str, Any]:
    """``(snake_case name, GX class)``; an unknown name is a clear error with close matches."""
    load()
    import difflib

    from great_expectations.expectations.registry import (
        get_expectation_impl,
        list_registered_expectation_implementations,
    )

    snake = snake_name(name)
    known = list_registered_expectation_implementations()
    if snake not in known:
        close = difflib.get_close_matches(snake, known, n=3, cutoff=0.6)
        hint = ("; did you mean " + " or ".join(close) + "?") if close else (
            "; see https://greatexpectations.io/expectations for the names")
        raise InvalidArgumentError(f"unknown expectation {name!r}{hint}")
    return snake, get_expectation_impl(snake)


def build(name: str, kwargs: dict[str, Any]) -> Any:
    """The GX expectation object, or a clear error naming the bad arguments."""
    snake, cls = expectation_class(name)
    reserved = sorted(set(kwargs) & _RESERVED_KWARGS)
    if reserved:
        raise InvalidArgumentError(f"{snake}: argument(s) {', '.join(reserved)} are set by tierlake")
    try:
        return cls(**kwargs)
    except Exception as e:  # noqa: BLE001 - pydantic's ValidationError lists every bad field
        lines = [line.strip() for line in str(e).splitlines()[1:] if line.strip()]
        problems: dict[str, str] = {}  # pydantic lists one line per type it tried; the first says enough
        for field_name, problem in zip(lines[::2], lines[1::2], strict=False):
            field_name = "arguments" if field_name == "__root__" else field_name
            problems.setdefault(field_name, re.sub(r" [(]type=.*[)]$", "", problem))
        detail = "; ".join(f"{k}: {v}" for k, v in problems.items()) or str(e)
        raise InvalidArgumentError(f"bad arguments for {snake} {json.dumps(kwargs, default=str)}: {detail}") from None


@dataclass
class Outcome:
    """One expectation's result, as stored in ``sys.quality_results``."""

    expectation: str
    success: bool | None  # None: could not be checked (sys.validate's lake comparison, lake_diff.py)
    observed_value: str | None = None
    unexpected_count: int | None = None
    unexpected_sample: str | None = None


def describe(name: str, kwargs: dict[str, Any]) -> str:
    """``expect_column_values_to_be_between(column="amount", max_value=100)``."""
    args = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in sorted(kwargs.items()))
    return f"{name}({args})"


def _json(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def _sample(result: dict[str, Any], key_columns: list[str], size: int) -> str | None:
    """Failing keys (primary-key tables: key columns and the checked value) or values."""
    rows = result.get("partial_unexpected_index_list") if key_columns else None
    values = rows if rows else result.get("partial_unexpected_list")
    if not values:
        return None
    seen, unique = set(), []
    for value in values:
        text = _json(value)
        if text not in seen:
            seen.add(text)
            unique.append(value)
    return _json(unique[:size])


def _context(spark: Any) -> Any:
    """One ephemeral GX context per process with a Spark data source for DataFrames."""
    if "batch_definition" not in _state:
        gx = load()
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
            ProgressBarsConfig,
        )

        config = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(),
                                   analytics_enabled=False, progress_bars=ProgressBarsConfig(globally=False))
        context = gx.get_context(project_config=config, mode="ephemeral")
        asset = context.data_sources.add_spark("tierlake").add_dataframe_asset("lake_table")
        _state["batch_definition"] = asset.add_batch_definition_whole_dataframe("whole_table")
    return _state["batch_definition"]


def run_suite(spark: Any, frame: Any, expectations: list[tuple[str, dict[str, Any]]],
              key_columns: list[str], sample_size: int) -> list[Outcome]:
    """Validate ``frame`` against ``expectations`` (``(name, kwargs)``); one outcome each, in order."""
    if not expectations:
        return []
    gx = load()
    with _lock:  # GX contexts and their registries are not made for concurrent use
        batch_definition = _context(spark)
        suite = gx.ExpectationSuite(name="tierlake")
        for index, (name, kwargs) in enumerate(expectations):
            expectation = build(name, kwargs)
            expectation.meta = {"tierlake_index": index}
            suite.add_expectation(expectation)
        result_format: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": sample_size}
        if key_columns:
            result_format["unexpected_index_column_names"] = list(key_columns)
        try:
            batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
            validation = batch.validate(suite, result_format=result_format)
        finally:
            frame.unpersist()  # GX persists the batch's DataFrame
    outcomes: list[Outcome | None] = [None] * len(expectations)
    for res in validation.results:
        index = int((res.expectation_config.meta or {}).get("tierlake_index", -1))
        if not 0 <= index < len(expectations):
            continue
        name, kwargs = expectations[index]
        result = dict(res.result or {})
        info = res.exception_info or {}
        observed = result.get("observed_value")
        if info.get("raised_exception"):
            observed = f"error: {info.get('exception_message')}"
        elif observed is not None:
            observed = _json(observed)
        count = result.get("unexpected_count")
        outcomes[index] = Outcome(describe(name, kwargs), bool(res.success), observed,
                                  None if count is None else int(count), _sample(result, key_columns, sample_size))
    return [o if o is not None else Outcome(describe(*expectations[i]), False, "error: no result")
            for i, o in enumerate(outcomes)]
