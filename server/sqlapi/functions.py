"""The SQL function registry: documented Python UDFs for every Spark session.

UDFs register exactly as procedures do, built-in or from a user extension::

    from tierlake.server.sqlapi.functions import functions

    @functions.udf(returns="double")
    def tierlake_half(x: float | None) -> float | None:
        '''Half of ``x``.

        Args:
          x: the number to halve; NULL gives NULL.
        '''
        return None if x is None else x / 2

Parameters come from the signature, their SQL types from the annotations,
their descriptions from the docstring's ``Args:`` block; a UDF without a
docstring, or with an undocumented parameter, cannot be registered.

With ``spark.sql.hive.thriftServer.singleSession=false`` every JDBC session
is its own ``SparkSession.newSession()``, which does not see Python UDFs of
the driver's session: :meth:`FunctionRegistry.register_into_thrift_session`
adds them to a session of the Spark Thrift Server after it opened. Sys views
never call them (they are views over the driver's catalog and must work in
any session).
"""

from __future__ import annotations

import datetime as dt
import inspect
import re
import threading
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

from tierlake.server.exceptions import ConfigError
from tierlake.server.sqlapi.docstrings import parse_docstring

# The SQL names of parameter annotations (a UDF argument may always be NULL,
# so ``X | None`` maps to the same type as ``X``).
_SCALARS = {str: "STRING", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN", dt.datetime: "TIMESTAMP",
            dt.date: "DATE"}
# Return types pyspark accepts as DDL strings and users read in the docs.
_RETURN_TYPES = {"string", "bigint", "int", "double", "boolean", "timestamp", "date"}
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _sql_type(annotation: Any) -> str:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            annotation = args[0]
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    raise TypeError(f"unsupported UDF parameter type {annotation!r}")


@dataclass(frozen=True)
class UdfParam:
    name: str
    sql_type: str
    description: str


@dataclass
class Udf:
    """A registered SQL function."""

    name: str
    func: Callable[..., Any]
    returns: str
    params: list[UdfParam]
    description: str
    doc: str
    deterministic: bool = True
    # The JVM UserDefinedPythonFunction, built once (pickling the function)
    # by the first registration and shared by every later session.
    _judf: Any = field(default=None, repr=False, compare=False)

    def signature(self) -> str:
        args = ", ".join(f"{p.name} {p.sql_type}" for p in self.params)
        return f"{self.name}({args}) → {self.returns.upper()}"


class FunctionRegistry:
    """Maps SQL function names to documented Python UDFs."""

    def __init__(self) -> None:
        self._udfs: dict[str, Udf] = {}
        self._lock = threading.Lock()
        self._jvm: Any = None
        self._operation_manager: tuple[Any, Any] | None = None

    def udf(self, name: str | None = None, *, returns: str,
            deterministic: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``func`` as the SQL function ``name`` (default: its own name)."""

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            self.register(func, name=name, returns=returns, deterministic=deterministic)
            return func

        return decorate

    def register(self, func: Callable[..., Any], *, name: str | None = None, returns: str,
                 deterministic: bool = True) -> Udf:
        name = (name or func.__name__).lower()
        if not _NAME.fullmatch(name):
            raise ValueError(f"invalid function name {name!r}")
        if returns.lower() not in _RETURN_TYPES:
            raise ValueError(f"function {name}: unsupported return type {returns!r} "
                             f"(one of {', '.join(sorted(_RETURN_TYPES))})")
        if not func.__doc__ or not func.__doc__.strip():
            raise ValueError(f"function {name} has no docstring: SQL functions are user-facing API")
        summary, param_docs = parse_docstring(func.__doc__)
        hints = typing.get_type_hints(func)
        params = []
        for p in inspect.signature(func).parameters.values():
            if p.kind is not p.POSITIONAL_OR_KEYWORD or p.default is not p.empty:
                raise ValueError(f"function {name}: parameter {p.name} must be plain and required "
                                 "(SQL functions take positional arguments)")
            if p.name not in hints:
                raise ValueError(f"function {name}: parameter {p.name} has no type annotation")
            if p.name not in param_docs:
                raise ValueError(f"function {name}: parameter {p.name} is not documented in the Args: block")
            params.append(UdfParam(p.name, _sql_type(hints[p.name]), param_docs[p.name]))
        udf = Udf(name=name, func=func, returns=returns.lower(), params=params, description=summary,
                  doc=inspect.cleandoc(func.__doc__), deterministic=deterministic)
        with self._lock:
            if name in self._udfs:
                raise ValueError(f"function {name} is already registered")
            self._udfs[name] = udf
        return udf

    def unregister(self, name: str) -> None:
        with self._lock:
            self._udfs.pop(name.lower(), None)

    def get(self, name: str) -> Udf:
        return self._udfs[name.lower()]

    def __iter__(self):
        return iter(sorted(self._udfs.values(), key=lambda u: u.name))

    def __len__(self) -> int:
        return len(self._udfs)

    # -- Spark --------------------------------------------------------------
    def register_into(self, spark: Any) -> list[str]:
        """Register every UDF into the pyspark ``SparkSession`` ``spark`` (the driver's).

        Refuses a name Spark already knows as a built-in function: a UDF
        would silently shadow it in every session.
        """
        jvm = spark.sparkContext._jvm
        clashes = sorted(u.name for u in self if _is_builtin(jvm, u.name))
        if clashes:
            raise ConfigError(f"UDF name(s) {', '.join(clashes)} shadow Spark built-in functions; rename them")
        names = []
        for udf in self:
            registered = spark.udf.register(udf.name, _pyspark_udf(udf))
            udf._judf = registered._judf
            names.append(udf.name)
        self._jvm = jvm
        return names

    def register_into_java(self, jsession: Any) -> int:
        """Register every UDF already registered into the driver's session
        (:meth:`register_into`) into the JVM ``SparkSession`` ``jsession``.

        One py4j call per UDF and no pickling: the JVM function objects are
        shared, as Spark does for ``newSession()`` clones of a session state.
        """
        count = 0
        for udf in self:
            if udf._judf is not None:
                jsession.udf().registerPython(udf.name, udf._judf)
                count += 1
        return count

    def register_into_thrift_session(self, thrift_server: Any, guid: bytes, secret: bytes) -> bool:
        """Give the Spark Thrift Server session ``(guid, secret)`` every UDF.

        Spark's ``SparkSQLOperationManager.sessionToContexts`` maps each Hive
        ``SessionHandle`` to its ``SQLContext`` (filled before OpenSession
        answers); a handle is equal to another with the same public and
        secret UUIDs, so one map lookup finds the session without scanning
        every open one. False when the session is unknown (e.g. already
        closed) or the driver's session has no UDFs yet.
        """
        if not self._udfs:
            return False
        jvm = self._jvm
        if jvm is None:
            return False  # not registered into the driver's session yet
        cached = self._operation_manager
        if cached is None or cached[0] is not thrift_server:
            cached = (thrift_server, _cli_service(thrift_server).getSessionManager().getOperationManager())
            self._operation_manager = cached
        manager = cached[1]
        ident = jvm.org.apache.hive.service.cli.HandleIdentifier(
            jvm.java.util.UUID.fromString(str(uuid.UUID(bytes=bytes(guid)))),
            jvm.java.util.UUID.fromString(str(uuid.UUID(bytes=bytes(secret)))),
        )
        protocol = jvm.org.apache.hive.service.rpc.thrift.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V1
        context = manager.sessionToContexts().get(jvm.org.apache.hive.service.cli.SessionHandle(ident, protocol))
        if context is None:
            return False
        # No bookkeeping of sessions already served: registering replaces a
        # temporary function of the same name with the same JVM object, so
        # the driver's session (every handle maps to it with
        # singleSession=true) just gets its UDFs again.
        self.register_into_java(context.sparkSession())
        return True


def _pyspark_udf(udf: Udf) -> Any:
    from pyspark.sql.functions import udf as make_udf

    wrapped = make_udf(udf.func, udf.returns)
    return wrapped if udf.deterministic else wrapped.asNondeterministic()


def _cli_service(thrift_server: Any) -> Any:
    # HiveServer2 keeps its CLIService (Spark's SparkSQLCLIService) as one of
    # its composite services; it has no public getter for it.
    for service in thrift_server.getServices():
        if service.getClass().getName().endswith("SparkSQLCLIService"):
            return service
    raise RuntimeError("the Spark Thrift Server has no SparkSQLCLIService")


def _is_builtin(jvm: Any, name: str) -> bool:
    registry = getattr(getattr(jvm.org.apache.spark.sql.catalyst.analysis, "FunctionRegistry$"), "MODULE$")
    return bool(registry.builtin().functionExists(jvm.org.apache.spark.sql.catalyst.FunctionIdentifier(name)))


functions = FunctionRegistry()
"""The registry the server uses; built-in UDFs and extensions both register here."""

