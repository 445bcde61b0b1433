"""Maintenance tests run tiering rounds: the tiering tests' fixtures (a worker, a fresh database)."""

from tests.server.tiering.conftest import db, workers  # noqa: F401 - fixtures, used by name
