"""Authorisation's JVM half (``FEATURE``): java/AuthzCheck.java, a session
extension whose check rule is the gateway's second line of authorisation, on
the plans Spark resolved, for the client sessions the gateway bound to a
role (authz.py binds them)."""

from tierlake.server.runtime.javaext import JvmFeature

AUTHZ_CHECK = "io.tierlake.internal.AuthzCheck"

FEATURE = JvmFeature("authorisation", extensions=(AUTHZ_CHECK,))
