"""The password file and `tierlake passwd`, without a JVM."""

import io
import os
import stat

import pytest

from tierlake.server.cli import main
from tierlake.server.exceptions import ConfigError
from tierlake.server.gateway.auth import passwords


def test_hashes_are_salted_and_verify(tmp_path):
    a, b = passwords.hash_password("pw"), passwords.hash_password("pw")
    assert a != b and a.startswith("scrypt$16384$8$1$")
    assert passwords.verify_password("pw", a) and not passwords.verify_password("pW", a)
    assert not passwords.verify_password("pw", "scrypt$garbage") and not passwords.verify_password("pw", "md5$x")


def test_pbkdf2_hashes_are_accepted():
    import base64
    import hashlib

    salt = b"0123456789abcdef"
    digest = hashlib.pbkdf2_hmac("sha256", b"secret", salt, 1000)
    stored = f"pbkdf2_sha256$1000${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"
    assert passwords.verify_password("secret", stored) and not passwords.verify_password("x", stored)


def test_set_change_delete_and_reload(tmp_path):
    path = tmp_path / "passwords"
    passwords.set_user(path, "alice", "one", frozenset({"admin"}))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "one" not in path.read_text()
    pf = passwords.PasswordFile(path)
    assert pf.authenticate("alice", "one") and not pf.authenticate("alice", "two")
    assert not pf.authenticate("nobody", "one") and pf.roles("nobody") == frozenset()
    passwords.set_user(path, "alice", "two", None)  # new password, roles kept
    passwords.set_user(path, "bob", "b", frozenset({"reader", "writer"}))
    os.utime(path, ns=(1, 1))  # a change within the mtime granularity must not be missed
    assert pf.authenticate("alice", "two") and pf.roles("alice") == {"admin"}
    assert pf.roles("bob") == {"reader", "writer"}
    passwords.set_user(path, "bob", None, frozenset({"reader"}))  # roles only
    assert pf.authenticate("bob", "b") and pf.roles("bob") == {"reader"}
    assert passwords.delete_user(path, "bob") and not passwords.delete_user(path, "bob")
    assert not pf.authenticate("bob", "b")


def test_bad_files_and_names_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the password file"):
        passwords.PasswordFile(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("alice:superuser:scrypt$x\n")
    with pytest.raises(ConfigError, match=r"bad:1: unknown role\(s\) superuser"):
        passwords.PasswordFile(bad)
    bad.write_text("# comment\n\nno-colons-here\n")
    with pytest.raises(ConfigError, match="bad:3: expected user:roles:hash"):
        passwords.PasswordFile(bad)
    with pytest.raises(ConfigError, match="invalid user name"):
        passwords.set_user(tmp_path / "p", "a:b", "x", frozenset({"reader"}))
    with pytest.raises(ConfigError, match="needs a password and --role"):
        passwords.set_user(tmp_path / "p", "new", "x", None)


def test_passwd_cli_reads_stdin_and_uses_the_configured_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "users"
    (tmp_path / "tierlake.conf").write_text(f"tierlake.gateway.password-file {path}\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    assert main(["passwd", "ts", "--role", "tiering-service", "--home", str(tmp_path)]) == 0
    assert "ts (tiering-service) saved" in capsys.readouterr().out
    assert passwords.PasswordFile(path).authenticate("ts", "s3cret")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["passwd", "ts", "--role", "reader,tiering-service", "--keep-password", "--file", str(path)]) == 0
    assert passwords.PasswordFile(path).roles("ts") == {"reader", "tiering-service"}
    assert main(["passwd", "ts", "--role", "root", "--file", str(path)]) == 2
    assert "unknown role(s) root" in capsys.readouterr().err
    assert main(["passwd", "ts", "--delete", "--file", str(path)]) == 0
    assert main(["passwd", "x", "--home", str(tmp_path / "nowhere")]) == 2


def test_client_password_resolution(tmp_path, monkeypatch):
    from tierlake_client.jdbc import resolve_password

    monkeypatch.delenv("TIERLAKE_PASSWORD", raising=False)
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    assert resolve_password(None) is None
    assert resolve_password(None, str(secret)) == "from-file"
    monkeypatch.setenv("TIERLAKE_PASSWORD", "from-env")
    assert resolve_password(None, str(secret)) == "from-env"
    assert resolve_password("flag", str(secret)) == "flag"
    monkeypatch.delenv("TIERLAKE_PASSWORD")
    with pytest.raises(ConfigError):
        resolve_password(None, str(tmp_path / "none"))
