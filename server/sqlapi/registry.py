"""The procedure registry: ``sys.<name>`` → a documented Python function.

Built-in procedures register exactly as a user extension would::

    from tierlake.server.sqlapi import registry
    from tierlake.server.sqlapi.roles import READER

    @registry.procedure(returns=[("greeting", "string")], role=READER, read_only=True)
    def hello(ctx, name: str = "world"):
        '''Say hello.

        Args:
          name: who to greet
        '''
        return [(f"hello {name}",)]

The module-level :func:`procedure` registers into :data:`default`, the
registry the server uses. Parameters come from the function signature (the
first parameter is always the :class:`~tierlake.server.sqlapi.context.Context`);
their SQL types from the annotations (see :mod:`tierlake.server.sqlapi.types`);
descriptions from an ``Args:`` block in the docstring; the role a caller
needs from ``role=`` (``admin`` when omitted). A procedure without a
docstring, or with an undocumented parameter, cannot be registered.
"""

from __future__ import annotations

import difflib
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierlake.server.exceptions import (
    InvalidArgumentError,
    ProcedureFailedError,
    TierlakeError,
    UnknownProcedureError,
)
from tierlake.server.sqlapi.context import Context
from tierlake.server.sqlapi.docstrings import parse_docstring
from tierlake.server.sqlapi.roles import ADMIN, check_role
from tierlake.server.sqlapi.types import coerce, sql_type

_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One documented, typed parameter."""

    name: str
    annotation: Any
    description: str
    default: Any = _REQUIRED

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    @property
    def sql_type(self) -> str:
        return sql_type(self.annotation)

    def signature(self) -> str:
        text = f"{self.name} {self.sql_type}"
        if not self.required:
            text += f" = {_sql_default(self.default)}"
        return text


def _sql_default(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)) and not value:
        return "array()"
    return str(value)


@dataclass
class Procedure:
    """A registered procedure."""

    name: str
    func: Callable[..., Any]
    params: list[Param]
    returns: list[tuple[str, str]]
    description: str
    doc: str
    read_only: bool = False
    role: str = ADMIN
    """The role a caller needs (see :mod:`tierlake.server.sqlapi.roles`)."""

    @property
    def qualified_name(self) -> str:
        return f"sys.{self.name}"

    def signature(self) -> str:
        return f"{self.qualified_name}({', '.join(p.signature() for p in self.params)})"

    def check_positional(self, count: int) -> None:
        """Refuse more positional arguments than parameters (the gateway asks before parsing them)."""
        if count > len(self.params):
            raise InvalidArgumentError(
                f"{self.qualified_name} takes at most {len(self.params)} argument(s), "
                f"got {count}; signature: {self.signature()}"
            )

    def bind(self, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Match CALL arguments to parameters and check their types."""
        self.check_positional(len(args))
        by_name = {p.name: p for p in self.params}
        bound: dict[str, Any] = {}
        for param, value in zip(self.params, args, strict=False):
            bound[param.name] = value
        for key, value in kwargs.items():
            if key not in by_name:
                close = difflib.get_close_matches(key, by_name, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise InvalidArgumentError(
                    f"{self.qualified_name} has no parameter {key!r}{hint} "
                    f"(signature: {self.signature()})"
                )
            if key in bound:
                raise InvalidArgumentError(
                    f"{self.qualified_name}: parameter {key!r} is given both by position and by name"
                )
            bound[key] = value
        out: dict[str, Any] = {}
        for param in self.params:
            if param.name in bound:
                out[param.name] = coerce(bound[param.name], param.annotation, f"parameter {param.name!r}")
            elif param.required:
                raise InvalidArgumentError(
                    f"{self.qualified_name}: missing required parameter {param.name!r} "
                    f"({param.sql_type}: {param.description})"
                )
            else:
                default = param.default
                out[param.name] = list(default) if isinstance(default, (list, tuple)) else default
        return out

    def invoke(self, ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> list[tuple]:
        """Bind, run and normalise the result to a list of tuples."""
        bound = self.bind(args, kwargs)
        try:
            result = self.func(ctx, **bound)
        except TierlakeError:
            raise
        except Exception as e:
            raise ProcedureFailedError(f"{self.qualified_name} failed: {type(e).__name__}: {e}") from e
        rows = []
        width = len(self.returns)
        for row in result or []:
            if isinstance(row, dict):
                row = tuple(row.get(name) for name, _ in self.returns)
            row = tuple(row)
            if len(row) != width:
                raise ProcedureFailedError(
                    f"{self.qualified_name} returned a row of {len(row)} values, expected {width}"
                )
            rows.append(row)
        return rows




class Registry:
    """Maps procedure names to :class:`Procedure` objects."""

    def __init__(self) -> None:
        self._procedures: dict[str, Procedure] = {}

    def procedure(
        self,
        name: str | None = None,
        *,
        returns: list[tuple[str, str]],
        role: str = ADMIN,
        read_only: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``func`` as ``sys.<name>``, callable with ``role``."""

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            self.register(func, name=name, returns=returns, role=role, read_only=read_only)
            return func

        return decorate

    def register(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        returns: list[tuple[str, str]],
        role: str = ADMIN,
        read_only: bool = False,
    ) -> Procedure:
        name = (name or func.__name__).lower()
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"invalid procedure name {name!r}")
        check_role(role)
        if name in self._procedures:
            raise ValueError(f"procedure sys.{name} is already registered")
        if not func.__doc__ or not func.__doc__.strip():
            raise ValueError(f"procedure sys.{name} has no docstring: procedures are user-facing SQL API")
        summary, param_docs = parse_docstring(func.__doc__)
        hints = typing.get_type_hints(func)
        sig = inspect.signature(func)
        params = []
        for i, p in enumerate(sig.parameters.values()):
            if i == 0:
                continue  # the Context
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise ValueError(f"sys.{name}: parameter {p.name} must be a plain parameter")
            if p.name not in hints:
                raise ValueError(f"sys.{name}: parameter {p.name} has no type annotation")
            if p.name not in param_docs:
                raise ValueError(f"sys.{name}: parameter {p.name} is not documented in the Args: block")
            sql_type(hints[p.name])  # fails early on unsupported types
            params.append(Param(p.name, hints[p.name], param_docs[p.name], p.default))
        proc = Procedure(
            name=name,
            func=func,
            params=params,
            returns=list(returns),
            description=summary,
            doc=inspect.cleandoc(func.__doc__),
            read_only=read_only,
            role=role,
        )
        self._procedures[name] = proc
        return proc

    def unregister(self, name: str) -> None:
        self._procedures.pop(name.lower(), None)

    def get(self, name: str) -> Procedure:
        """The procedure called ``name``; unknown names suggest close ones."""
        key = name.lower()
        if key.startswith("sys."):
            key = key[4:]
        try:
            return self._procedures[key]
        except KeyError:
            close = difflib.get_close_matches(key, self._procedures, n=3, cutoff=0.5)
            hint = (
                "; did you mean " + " or ".join(f"sys.{c}" for c in close) + "?"
                if close
                else "; SELECT * FROM sys.procedures lists them"
            )
            raise UnknownProcedureError(f"unknown procedure sys.{key}{hint}") from None

    def __iter__(self):
        return iter(sorted(self._procedures.values(), key=lambda p: p.name))

    def __len__(self) -> int:
        return len(self._procedures)


default = Registry()
"""The registry the server uses; built-ins and extensions both register here."""


def procedure(
    name: str | None = None,
    *,
    returns: list[tuple[str, str]],
    role: str = ADMIN,
    read_only: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``func`` as ``sys.<name>`` in :data:`default`."""
    return default.procedure(name, returns=returns, role=role, read_only=read_only)


__all__ = ["Context", "Param", "Procedure", "Registry", "default", "procedure"]
