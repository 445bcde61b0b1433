"""The sys-state store: tierlake's own ``sys`` tables, on top of the process runtime.

- :mod:`.state_table`: :class:`~.state_table.SmallTable`, small state tables
  (coordinator state, KV catalog, journals) read and rewritten whole, without a
  Spark job, through ``java/SmallTables.java`` (``runtime/javaext.py`` compiles it
  with every other feature's Java into one jar);
- :mod:`.state_version`: the version of the ``sys`` state this process changed,
  for caches of reads from it (the gateway's status reads) and ``settle``;
- :mod:`.migrations`: the ordered schema migrations of ``sql/schema/`` and the
  ``sys`` views of ``sql/views/``;
- :mod:`.housekeeping`: the housekeeping thread that keeps every ``sys`` table
  bounded (snapshot expiry, history retention, compaction, orphan files).
"""
