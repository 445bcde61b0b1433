"""Plain-text tables for the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    return str(value).replace("\n", "\\n")


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Render rows as a ``+---+`` boxed table, like beeline's default output."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=False)) + " |"

    return "\n".join([rule, line(columns), rule, *(line(r) for r in cells), rule])
