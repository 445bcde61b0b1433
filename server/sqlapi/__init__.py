"""The SQL API mechanism: how ``CALL sys.<name>(...)`` reaches a Python function.

- :mod:`.registry`: :class:`~.registry.Registry`, :class:`~.registry.Procedure`
  and the ``@registry.procedure(returns=..., role=...)`` decorator;
- :mod:`.types`: SQL types from annotations and the coercion of CALL values;
- :mod:`.roles`: role names and which held roles satisfy which;
- :mod:`.context`: the typed :class:`~.context.Context` a procedure runs with.

The procedures themselves (``tierlake.procedures``) are the SQL API built on
this; the engine never imports them (only the composition root
``server/app.py`` loads them).
"""
