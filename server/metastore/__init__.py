"""The Hive metastore the Spark catalog lives in, and tierlake's code inside it.

- :mod:`.database`: where it lives (embedded Derby or a shared PostgreSQL),
  its lock tables, a remote service's locks;
- :mod:`.service`: this server's metastore served over Hive's Thrift protocol
  on loopback, for ``tierlake tiering-service`` processes;
- :mod:`.jvm`: what it adds to Spark (``FEATURE``): the session catalog
  (java/SessionViews.java), and for an embedded metastore the compare-and-set
  ``alter_table`` (java/CasAlterHandler.java), the table cache
  (java/CachingObjectStore.java) and the lock store that pauses the stream
  committers for another application's lock (java/TierlakeTxnHandler.java).
"""
