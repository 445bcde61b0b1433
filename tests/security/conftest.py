"""Fixtures of the security tests: a password file, a self-signed TLS
certificate, and gateways with auth on in front of the shared server's
Spark Thrift Server (the real gateway and handler, no second JVM)."""

from __future__ import annotations

import subprocess

import pytest

PASSWORD = {"ann": "ann-pw", "rita": "rita-pw", "will": "will-pw", "ts": "ts-pw"}
ROLES = {"ann": "admin", "rita": "reader", "will": "writer", "ts": "tiering-service"}


@pytest.fixture(scope="session")
def password_file(tmp_path_factory):
    from tierlake.server.gateway.auth.passwords import set_user

    path = tmp_path_factory.mktemp("auth") / "passwords"
    for user, role in ROLES.items():
        set_user(path, user, PASSWORD[user], frozenset({role}))
    return path


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """(cert.pem, key.pem, truststore.jks) for 127.0.0.1/localhost, made with the openssl and keytool CLIs."""
    d = tmp_path_factory.mktemp("tls")
    cert, key, store = d / "cert.pem", d / "key.pem", d / "truststore.jks"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "tierlake", "-file", str(cert),
                    "-keystore", str(store), "-storepass", "changeit", "-storetype", "JKS"],
                   check=True, capture_output=True)
    return cert, key, store


def configured_gateway(server, real_handler: bool = True, **conf):
    """A gateway built by the server's own code path from the server's config plus ``conf``."""
    from tierlake.server.app import gateway_from_config
    from tierlake.server.config.config import Config
    from tierlake.server.gateway.auth.authz import SparkSessions
    from tierlake.server.gateway.routing.handler import CallHandler, DdlHandler
    from tierlake.server.gateway.routing.router import Router

    config = Config(home=server.config.home, values={**server.config.values, "tierlake.gateway.port": "0", **conf})
    # The server's own chain of statement handlers (the ingest path, sys reads, CALLs and tiered DDL):
    # a writer's INSERT into a stream table goes through the ingest checks, as in production.
    handler = (server._handler() if real_handler
               else Router([CallHandler(server.registry, server.context), DdlHandler(server.context)]))
    gw = gateway_from_config(config, handler, server.thrift_port, server.registry,
                             backend_secret=server.internal_secret)
    gw.authorizer.attach(SparkSessions(server.spark, server.thrift_server))
    return gw.start()


@pytest.fixture(scope="session")
def auth_gateway(server, password_file):
    gw = configured_gateway(server, **{"tierlake.gateway.password-file": str(password_file)})
    yield gw
    gw.stop()


@pytest.fixture(scope="session")
def tls_gateway(server, password_file, tls_files):
    cert, key, _ = tls_files
    gw = configured_gateway(server, **{"tierlake.gateway.password-file": str(password_file),
                                       "tierlake.gateway.ssl.certfile": str(cert),
                                       "tierlake.gateway.ssl.keyfile": str(key)})
    yield gw
    gw.stop()
