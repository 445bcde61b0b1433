"""Configuration, at the bottom of the engine: what every layer reads and nothing
below it. The settings registry (settings.py, ``SETTINGS``: every ``tierlake.*``
key with its default, type and help), the one parser of setting and
table-property values (values.py: int, duration, bool, choice), durations
(durations.py), and a process's loaded configuration (config.py, ``Config``:
the config file, ``--conf`` values and ``$TIERLAKE_HOME``). It imports nothing
of the engine but ``server/exceptions.py``.
"""
