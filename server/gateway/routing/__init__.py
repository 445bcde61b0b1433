"""Statement routing: the handlers that answer a statement in the gateway
instead of relaying it to Spark, outermost first: INSERTs into stream tables
(ingest.py), the cache of ``sys`` status reads (sys_reads.py), ``CALL sys.*``
and tiered DDL recognised on Spark's parse (handler.py, ddl.py, fresh_ddl.py;
the engine runs the DDL: server/tiering/ddl.py).

Each is a statement handler of ``transport/protocol.py`` and decides on the
parse the authoriser made (``auth/planauth.py``).
"""
