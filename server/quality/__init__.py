"""Data quality of lake tables (docs/design.md, 'Data quality'): a Great Expectations suite per
table — derived checks plus user expectations — run by ``sys.validate`` and,
per ``table.datalake.quality``, by tiering rounds (warn: after publishing;
block: on the round's branch before ``main`` is fast-forwarded to it).
"""
