"""Fewer py4j round trips on the driver's hot paths (a tiering round makes
hundreds; each is a socket round trip to the JVM and a thread hop there).

- ``jvm.a.b.C`` costs a round trip per name segment (py4j asks the JVM
  whether each is a package or a class): :func:`jclass` resolves a class
  once per JVM.
- Reading a Java map entry by entry (``dict(java_map)``) costs two or three
  round trips per entry: :func:`string_map` and :func:`string_list` move a
  map or collection of strings as one JSON text (Jackson, on Spark's class
  path).

Plain Python values (tests' fakes) go through unchanged.
"""

from __future__ import annotations

import json
import threading
from typing import Any

_lock = threading.Lock()
# Keyed by the JVM view's id, holding the view itself: an id reused by a later
# session's view (a restarted SparkContext) is not taken for the old one.
_classes: dict[tuple[int, str], tuple[Any, Any]] = {}
_mapper: dict[int, tuple[Any, Any]] = {}


def _default_jvm() -> Any:
    from pyspark import SparkContext

    return SparkContext._jvm


def jclass(name: str, jvm: Any = None) -> Any:
    """The py4j ``JavaClass`` of the fully qualified ``name`` (static methods, constructors), resolved once."""
    jvm = jvm if jvm is not None else _default_jvm()
    key = (id(jvm), name)
    cached = _classes.get(key)
    if cached is not None and cached[0] is jvm:
        return cached[1]
    found = jvm
    for part in name.split("."):
        found = getattr(found, part)
    with _lock:
        _classes[key] = (jvm, found)
    return found


def _json(value: Any) -> str:
    jvm = _default_jvm()
    cached = _mapper.get(id(jvm))
    if cached is not None and cached[0] is jvm:
        mapper = cached[1]
    else:
        mapper = jclass("com.fasterxml.jackson.databind.ObjectMapper", jvm)()
        with _lock:
            _mapper[id(jvm)] = (jvm, mapper)
    return str(mapper.writeValueAsString(value))


def is_java(value: Any) -> bool:
    """``value`` is a py4j proxy of a Java object (not a test's Python fake)."""
    from py4j.java_gateway import JavaObject

    return isinstance(value, JavaObject) and _default_jvm() is not None


def string_map(value: Any) -> dict[str, str]:
    """A Java ``Map`` of strings (table properties, a snapshot summary) as a dict, in one round trip."""
    if is_java(value):
        return {str(k): str(v) for k, v in json.loads(_json(value)).items()}
    return {str(k): str(v) for k, v in dict(value).items()}


def string_list(value: Any) -> list[str]:
    """A Java collection of strings (a map's ``keySet()``) as a list, in one round trip."""
    if is_java(value):
        return [str(v) for v in json.loads(_json(value))]
    return [str(v) for v in value]


def to_json(value: Any) -> Any:
    """A Java value Jackson can write (a map, a list, a bean) as parsed JSON, in one round trip."""
    return json.loads(_json(value))
