"""Observability: Prometheus metrics, the status page and the HTTP server that serves both.

Every layer of the engine records metrics, so this package sits just above
``exceptions`` and imports nothing else of the engine: the composition root
(``server/app.py``) hands the HTTP server what it shows (docs/observability.md).
"""
