"""The gateway's transport: the HiveServer2 Thrift server clients connect to
(server.py: listening, admission, drain; settings.py: its one settings object;
connection.py: a thread per connection, handles bound to their connection, the
relay; local.py: the statements the gateway answers itself, as operations),
schema-less message framing, the statement object and the statement handler
interface (protocol.py), SASL PLAIN (sasl.py), TLS, NOSASL refusal and connection slots
(security.py), the methods answered from raw frames (rawmethods.py), and the
link to the internal Spark Thrift Server (upstream.py; backend_client.py, a
gateway-owned session on it).

It decides nothing about users' rights itself: requests are checked through
``auth`` (the Authorizer is handed in by the composition root), and the
statements the gateway answers itself are ``routing``'s routes.
"""
