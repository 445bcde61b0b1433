"""The HiveServer2 gateway, in three sub-packages and one module, lowest first:
``auth`` (logins, roles, authorisation on Spark's parse), ``results.py``
(a gateway-made result as HiveServer2 row sets), ``transport`` (the Thrift
server, framing, SASL/TLS, the relay to Spark's Thrift server) and
``routing`` (the statements the gateway answers itself). A sub-package imports
only those before it (tests/test_architecture.py, ``GATEWAY_LAYERS``).
"""
