"""How the server builds its gateway from the settings, without a JVM."""

import logging

import pytest

from tests.server.gateway.toy import ToyHandler
from tierlake.server.app import gateway_from_config
from tierlake.server.config.config import DEFAULTS, Config
from tierlake.server.exceptions import ConfigError
from tierlake.server.gateway.auth.passwords import set_user


def build(tmp_path, **conf):
    return gateway_from_config(Config(home=tmp_path, values={**DEFAULTS, "tierlake.gateway.port": "0", **conf}),
                               ToyHandler(), 1)


def test_default_is_development_mode_on_loopback(tmp_path):
    assert DEFAULTS["tierlake.gateway.host"] == "127.0.0.1"
    gw = build(tmp_path)
    assert gw.host == "127.0.0.1" and gw.settings.auth == "PLAIN" and gw.settings.ssl_context is None
    assert not gw.authorizer.enabled


def test_password_file_turns_auth_on(tmp_path):
    path = tmp_path / "users"
    set_user(path, "ann", "pw", frozenset({"admin"}))
    gw = build(tmp_path, **{"tierlake.gateway.password-file": str(path)})
    assert gw.authorizer.enabled
    assert gw.authenticator("ann", "pw") and not gw.authenticator("ann", "nope")
    with pytest.raises(ConfigError, match="NOSASL cannot check passwords"):
        build(tmp_path, **{"tierlake.gateway.password-file": str(path), "tierlake.gateway.auth": "NOSASL"})
    with pytest.raises(ConfigError, match="cannot read the password file"):
        build(tmp_path, **{"tierlake.gateway.password-file": str(tmp_path / "missing")})


def test_bad_certificate_is_a_config_error(tmp_path):
    (tmp_path / "cert.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="TLS certificate"):
        build(tmp_path, **{"tierlake.gateway.ssl.certfile": str(tmp_path / "cert.pem")})


def test_development_mode_off_loopback_warns(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="tierlake.server"):
        build(tmp_path, **{"tierlake.gateway.host": "0.0.0.0"})
    assert "anyone who can reach the gateway may do everything" in caplog.text
