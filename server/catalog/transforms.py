"""Lake partition transforms as users write them in ``table.datalake.partition``:
``days(ts), bucket(4, id)``.

Pure text parsing, below both the property registry (which validates the
property) and :mod:`tierlake.server.catalog.spec` (which renders the SQL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tierlake.server.exceptions import InvalidArgumentError

_TRANSFORM = re.compile(
    r"^\s*(years|months|days|hours|identity|bucket|truncate)\s*\((.*)\)\s*$|^\s*([A-Za-z_]\w*)\s*$", re.I
)
_COLUMN = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Transform:
    name: str  # years, months, days, hours, identity, bucket, truncate
    column: str  # lower case
    width: int | None = None  # bucket/truncate's number


def parse_transform(text: str, what: str = "table.datalake.partition") -> Transform:
    """``'bucket(4, id)'`` → ``Transform('bucket', 'id', 4)``; a bare column is ``identity``."""
    m = _TRANSFORM.match(text)
    if not m:
        raise InvalidArgumentError(f"'{what}': cannot read partition transform {text!r}")
    if m.group(3):
        return Transform("identity", m.group(3).lower())
    name, args = m.group(1).lower(), [a.strip() for a in m.group(2).split(",")]
    if name in ("bucket", "truncate"):
        if len(args) != 2 or not args[0].isdigit() or int(args[0]) < 1:
            raise InvalidArgumentError(f"'{what}': {name} needs (number, column), got {text!r}")
        width: int | None = int(args[0])
    elif len(args) != 1:
        raise InvalidArgumentError(f"'{what}': {name} takes one column, got {text!r}")
    else:
        width = None
    if not _COLUMN.match(args[-1]):
        raise InvalidArgumentError(f"'{what}': {args[-1]!r} in {text!r} is not a column name")
    return Transform(name, args[-1].lower(), width)


def split_transforms(text: str) -> list[str]:
    """'days(ts), bucket(4, id)' → ['days(ts)', 'bucket(4, id)'] (commas inside
    parentheses kept, empty entries dropped)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]
