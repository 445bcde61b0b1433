"""Statements typed line by line, each ending with ``;`` (``tierlake sql``'s
interactive session).

A ``;`` ends a statement only outside string literals (``'…'``, ``"…"``,
with Spark's ``\\`` escapes), back-quoted names and ``--`` comments, so
``SELECT ';' AS s;`` is one statement.
"""

from __future__ import annotations


class StatementBuffer:
    """Collects lines; :meth:`feed` returns the statements they complete."""

    def __init__(self) -> None:
        self._text = ""
        self._quote: str | None = None  # the open quote character, if inside a literal or name
        self._escaped = False

    @property
    def empty(self) -> bool:
        return not self._text.strip()

    def feed(self, line: str) -> list[str]:
        done = []
        comment = False
        for ch in line + "\n":
            if comment:
                if ch == "\n":
                    comment = False
                    self._text += ch
                continue
            if self._quote is not None:
                self._text += ch
                if self._escaped:
                    self._escaped = False
                elif ch == "\\" and self._quote != "`":
                    self._escaped = True
                elif ch == self._quote:
                    self._quote = None
                continue
            if ch in "'\"`":
                self._quote = ch
                self._text += ch
            elif ch == "-" and self._text.endswith("-"):
                self._text = self._text[:-1]
                comment = True
            elif ch == ";":
                statement = self._text.strip()
                self._text = ""
                if statement:
                    done.append(statement)
            else:
                self._text += ch
        return done

    def rest(self) -> str:
        """What was typed after the last ``;`` (run at the end of input)."""
        return self._text.strip()
