"""Managed maintenance of tiered tables: the one home for table maintenance.

- :mod:`.tables`: compaction, snapshot expiry and orphan-file removal of a lake
  table and its stream table, run by a tiering worker after a round when the
  coordinator says it is due (``sys.maintenance_due``);
- :mod:`.kv_tables`: the server's periodic KV maintenance: due KV snapshots,
  their retention, log retention (``table.log.ttl``), fresh views re-pinned
  after a schema change, KV tables of dropped stream tables dropped.

Elsewhere, because of the layers (docs/architecture.md, "Where maintenance lives"): the
Iceberg actions both use (``runtime/iceberg_actions.py``: catalog, changelog,
kv and the state store use them too), when maintenance is due
(``coordinator/maintenance_schedule.py``: the coordinator's state machine
owns it), and the housekeeping of ``sys`` tables (``state/housekeeping.py``).
"""
