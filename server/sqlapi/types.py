"""SQL types of procedure parameters, derived from Python annotations.

A procedure declares ``table: str`` or ``tables: list[FinishedTable]``; this
module turns the annotation into the SQL type users see in ``sys.procedures``
and checks/coerces the literal values parsed from a ``CALL``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import types
import typing
from decimal import Decimal
from typing import Any, Union

from tierlake.server.exceptions import InvalidArgumentError
from tierlake.sql.values import SqlMap, SqlStruct

__all__ = ["JsonObject", "SqlMap", "SqlStruct", "coerce", "sql_type"]


class JsonObject(dict):
    """A JSON object, written in a CALL as a STRING holding JSON or as ``map(...)``
    (values may be literals, ``array(...)`` or nested ``map(...)``)."""


_SCALARS = {
    str: "STRING",
    int: "BIGINT",
    float: "DOUBLE",
    bool: "BOOLEAN",
    dt.datetime: "TIMESTAMP",
}


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def sql_type(annotation: Any) -> str:
    """The SQL spelling of a Python annotation, e.g. ``ARRAY<BIGINT>``."""
    annotation, _ = _unwrap_optional(annotation)
    if annotation is JsonObject:
        return "JSON"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return f"ARRAY<{sql_type(item)}>"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"MAP<{sql_type(key)}, {sql_type(value)}>"
    if dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        fields = ", ".join(f"{f.name}: {sql_type(hints[f.name])}" for f in dataclasses.fields(annotation))
        return f"STRUCT<{fields}>"
    raise TypeError(f"unsupported procedure parameter type {annotation!r}")


def _describe(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, SqlStruct):
        return "named_struct"
    if isinstance(value, SqlMap):
        return "map"
    if isinstance(value, list):
        return "array"
    kind = {str: "STRING", bool: "BOOLEAN", int: "BIGINT", float: "DOUBLE", Decimal: "DECIMAL"}.get(
        type(value), type(value).__name__
    )
    text = repr(value) if isinstance(value, str) else str(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{kind} {text}"


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check ``value`` against ``annotation``; ``where`` names the argument in errors."""
    annotation, nullable = _unwrap_optional(annotation)
    if value is None:
        if nullable:
            return None
        raise InvalidArgumentError(f"{where} must not be NULL (expected {sql_type(annotation)})")

    def bad() -> InvalidArgumentError:
        return InvalidArgumentError(f"{where}: expected {sql_type(annotation)}, got {_describe(value)}")

    if annotation is JsonObject:
        return _json_object(value, where)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise bad()
    if annotation is int:
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, int):
            return value
        if isinstance(value, Decimal) and value == value.to_integral_value():
            return int(value)
        raise bad()
    if annotation is float:
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            return float(value)
        raise bad()
    if annotation is str:
        if isinstance(value, str):
            return value
        raise bad()
    if annotation is dt.datetime:
        if isinstance(value, dt.datetime):
            return value
        raise bad()
    origin = typing.get_origin(annotation)
    if origin is list:
        if not isinstance(value, list):
            raise bad()
        (item,) = typing.get_args(annotation)
        return [coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, SqlMap):
            raise bad()
        key_t, value_t = typing.get_args(annotation)
        return {coerce(k, key_t, f"{where} key"): coerce(v, value_t, f"{where}[{k!r}]") for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, SqlStruct):
            raise bad()
        hints = typing.get_type_hints(annotation)
        fields = {f.name: f for f in dataclasses.fields(annotation)}
        lowered = {k.lower(): v for k, v in value.items()}
        unknown = sorted(set(lowered) - set(fields))
        if unknown:
            raise InvalidArgumentError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(fields)})")
        kwargs = {}
        for name, field in fields.items():
            if name in lowered:
                kwargs[name] = coerce(lowered[name], hints[name], f"{where}.{name}")
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise InvalidArgumentError(f"{where}: missing field {name!r}")
        return annotation(**kwargs)
    raise TypeError(f"unsupported procedure parameter type {annotation!r}")


def _plain(value: Any, where: str) -> Any:
    """CALL literal values as JSON values (DECIMAL literals become numbers)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and "." not in str(value) else float(value)
    if isinstance(value, list):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise InvalidArgumentError(f"{where}: keys of a JSON object must be strings")
        return {k: _plain(v, where) for k, v in value.items()}
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise InvalidArgumentError(f"{where}: {_describe(value)} is not a JSON value")


def _json_object(value: Any, where: str) -> JsonObject:
    import json

    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError as e:
            raise InvalidArgumentError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(parsed, dict):
            raise InvalidArgumentError(f"{where}: expected a JSON object, got {type(parsed).__name__}")
        return JsonObject(parsed)
    if isinstance(value, SqlMap):
        return JsonObject(_plain(dict(value), where))
    raise InvalidArgumentError(f"{where}: expected a JSON object (a STRING or map(...)), got {_describe(value)}")
