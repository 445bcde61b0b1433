"""The security fixtures (auth and TLS gateways) for the fault suite too."""

from tests.security.conftest import auth_gateway, password_file, tls_files, tls_gateway  # noqa: F401
