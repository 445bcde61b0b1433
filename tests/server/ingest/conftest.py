"""The tiering tests' fixtures (a fresh database, a tiering worker) for ingest tests."""

from tests.server.tiering.conftest import db, workers  # noqa: F401 - fixtures, found here by pytest
