"""The KV tests run against the shared server like the tiering tests, with the same fixtures."""

from tests.server.tiering.conftest import db  # noqa: F401 - a fixture: one fresh database per test
