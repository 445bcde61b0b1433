"""The docstring convention of procedures and UDFs (they are user-facing SQL API)."""

from __future__ import annotations

import inspect
import re

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s{2,}(\w+)\s*:\s*(.+)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(summary line, {parameter: description}) of a Google-style docstring.

    Procedures and UDFs are documented the same way: a summary line, then an
    ``Args:`` block with one ``name: description`` line per parameter
    (continuation lines indented further).
    """
    lines = inspect.cleandoc(doc).splitlines()
    summary = lines[0].strip() if lines else ""
    params: dict[str, str] = {}
    in_args = False
    current = None
    for line in lines[1:]:
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if in_args:
            m = _ARG_LINE.match(line)
            if m:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif line.strip() and current and line.startswith("      "):
                params[current] += " " + line.strip()
            elif line.strip() and not line.startswith(" "):
                in_args = False
    return summary, params
