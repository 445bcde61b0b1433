"""tierlake's client side, installable without Spark (distribution ``tierlake-client``).

- :mod:`tierlake_client.sqlalchemy_dialect`: the ``tierlake://`` SQLAlchemy
  dialect (SQLAlchemy 1.4 and 2.x; pandas, Superset, Redash);
- :mod:`tierlake_client.procedure_client`: :class:`Admin` and the JDBC
  procedure client (``CALL sys.*`` from Python);
- :mod:`tierlake_client.jdbc`: PyHive connections from ``jdbc:hive2://`` URLs
  (SASL PLAIN, TLS, NOSASL);
- :mod:`tierlake_client.superset`: the Superset engine spec ``tierlake`` and
  the shipped dashboard.
"""

__version__ = "0.1.0"
