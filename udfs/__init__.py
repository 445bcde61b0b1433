"""Python UDFs registered into the server's SparkSession.

Sys views never call them (JDBC sessions of the Thrift Server do not see
Python UDFs registered on the driver's session unless it runs in single-session
mode); procedures and tiering statements run in the driver's session and may.
"""
