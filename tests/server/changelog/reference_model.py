"""A pure-Python reference model of the changelog rule of primary-key tables
(docs/tiering.md, "What lands in the lake"), the oracle of the generated
tests: no Spark, no SQL, written from the documented rule alone.

- Changes to one key are ordered by commit; within one commit by the
  ``sequence-by`` value (the larger wins).
- ``-U`` rows are before-images: ignored. ``+I``, ``+U`` and NULL upsert;
  ``-D`` deletes.
- Two changes of one key in one commit with different effects (a delete vs
  an upsert, or upserts of different rows) must be ordered by distinct,
  non-NULL sequence values where it matters: no ``sequence-by``, a NULL
  sequence value on any of them, or a tie at the largest value fails the
  commit. Changes with the same effect (two deletes, two upserts of the same
  row) are not a conflict.
- A change type other than ``+I``, ``-U``, ``+U``, ``-D``, NULL, or a NULL
  key column, fails the commit.

A failing commit changes nothing; the state stays that of the commit before.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CHANGE_TYPES = ("+I", "-U", "+U", "-D")
DELETE = ("-D",)


@dataclass(frozen=True)
class Change:
    """One stream row: its key, the full lake row (key columns included),
    its ``_change_type`` and its ``sequence-by`` value (None: NULL or no column)."""

    key: tuple
    row: tuple
    change_type: str | None
    seq: Any = None

    @property
    def effect(self) -> tuple:
        return DELETE if self.change_type == "-D" else ("upsert", self.row)


@dataclass
class Violation:
    """Why a commit fails: the unknown change types with their row counts,
    the number of rows with a NULL key, the keys whose changes cannot be ordered."""

    commit: int
    change_types: dict[str, int] = field(default_factory=dict)
    null_keys: int = 0
    ambiguous: list[tuple] = field(default_factory=list)


@dataclass
class Outcome:
    state: dict[tuple, tuple]  # key → lake row after the last good commit
    violation: Violation | None = None

    @property
    def failed_commit(self) -> int | None:
        return None if self.violation is None else self.violation.commit


def check(commit: list[Change], index: int, sequence_by: bool) -> Violation | None:
    """The violations of one commit, or None."""
    violation = Violation(index)
    violation.change_types = dict(Counter(c.change_type for c in commit
                                          if c.change_type is not None and c.change_type not in CHANGE_TYPES))
    violation.null_keys = sum(1 for c in commit if any(k is None for k in c.key))
    by_key: dict[tuple, list[Change]] = {}
    for c in commit:
        if c.change_type == "-U" or (c.change_type is not None and c.change_type not in CHANGE_TYPES):
            continue  # -U rows are ignored; unknown types are reported above
        if any(k is None for k in c.key):
            continue  # reported above
        by_key.setdefault(c.key, []).append(c)
    for key, changes in by_key.items():
        if len({c.effect for c in changes}) == 1:
            continue
        if not sequence_by or any(c.seq is None for c in changes):
            violation.ambiguous.append(key)
            continue
        top = max(c.seq for c in changes)
        if len({c.effect for c in changes if c.seq == top}) > 1:
            violation.ambiguous.append(key)
    if violation.change_types or violation.null_keys or violation.ambiguous:
        return violation
    return None


def winners(commit: list[Change], sequence_by: bool) -> dict[tuple, tuple]:
    """The effect per key of a commit that passed :func:`check`."""
    out: dict[tuple, tuple] = {}
    best: dict[tuple, Any] = {}
    for c in commit:
        if c.change_type == "-U":
            continue
        if c.key not in out or (sequence_by and c.seq is not None and best[c.key] is not None
                                and c.seq > best[c.key]):
            out[c.key], best[c.key] = c.effect, c.seq
    return out


def replay(commits: list[list[Change]], sequence_by: bool, state: dict | None = None) -> Outcome:
    """Apply ``commits`` in order; stop at the first failing one."""
    state = dict(state or {})
    for index, commit in enumerate(commits):
        violation = check(commit, index, sequence_by)
        if violation is not None:
            return Outcome(state, violation)
        for key, effect in winners(commit, sequence_by).items():
            if effect == DELETE:
                state.pop(key, None)
            else:
                state[key] = effect[1]
    return Outcome(state)
