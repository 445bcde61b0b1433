"""The internal Spark Thrift Server's only login (server/runtime/java/SecretAuthenticator.java),
driven from pytest: the class alone, as Hive's SASL PLAIN server calls it."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.integration


def test_only_the_processs_secret_logs_in_and_nothing_before_it_is_set(spark):
    jvm = spark.sparkContext._jvm
    cls = jvm.io.tierlake.internal.SecretAuthenticator
    field = jvm.java.lang.Class.forName("io.tierlake.internal.SecretAuthenticator").getDeclaredField("digest")
    field.setAccessible(True)
    saved = field.get(None)  # the running server's secret: restored below
    try:
        field.set(None, None)
        authenticator = cls()
        with pytest.raises(Py4JJavaError, match="accepts only the tierlake gateway"):
            authenticator.Authenticate("gateway", "anything")  # no secret yet: every login refused
        cls.setSecret("s3cret")
        authenticator.Authenticate("any user", "s3cret")
        for wrong in ("s3cre", "s3cret ", "", None):
            with pytest.raises(Py4JJavaError, match="accepts only the tierlake gateway"):
                authenticator.Authenticate("any user", wrong)
    finally:
        field.set(None, saved)
