"""Errors a user can read: Spark's analysis and parse errors, relayed by the
gateway, as one short line with their SQLSTATE.

Spark's Thrift Server answers a statement it rejects with
``org.apache.hive.service.cli.HiveSQLException: Error running query:
[TABLE_OR_VIEW_NOT_FOUND] org.apache.spark.sql.AnalysisException:
[TABLE_OR_VIEW_NOT_FOUND] The table or view `db`.`t` cannot be found. Verify
…; line 1 pos 14;`` followed by the analysed plan and, for an asynchronous
statement, the Java stack, with error code 0. The gateway keeps Spark's error
class and its first sentence, the position, and its SQLSTATE, and gives the
common ones tierlake's error codes (docs/errors.md):

=========================  ========  ====  ==================================
Spark's error class         SQLSTATE  code  class in server/exceptions.py
=========================  ========  ====  ==================================
TABLE_OR_VIEW_NOT_FOUND     42P01     2004  NoSuchTableError
UNRESOLVED_COLUMN.*         42703     2015  NoSuchColumnError
PARSE_SYNTAX_ERROR          42601     2001  SqlSyntaxError
=========================  ========  ====  ==================================

A statement whose planning thread its deadline stopped (``java.lang.ThreadDeath``,
StatementDeadline.java) is answered ``statement stopped: it ran longer than its
time limit …``, SQLSTATE 57014.

A refusal of the check rule on Spark's resolved plan (``AuthzCheck.java``,
``java.lang.SecurityException: permission denied: …``) is answered as the
gateway's own refusals are: ``permission denied: …``, 42501, code 2008.

Any other error with an error class loses its Java class names, plan and
stack the same way and keeps Spark's SQLSTATE. The full text stays in
spark.log (Spark's Thrift Server logs every failed statement with its stack).
"""

from __future__ import annotations

import re

from tierlake.server.exceptions import NoSuchColumnError, NoSuchTableError, PermissionDeniedError, SqlSyntaxError

# [ERROR_CLASS] or [ERROR_CLASS.SUB_CLASS]
_CLASS = re.compile(r"\[(?P<cls>[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)?)\]")
# A qualified Java class name ending in Exception/Error, with its colon.
_JAVA = re.compile(r"(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b:?\s*")
_PREFIXES = ("Error running query:", "Error operating ExecuteStatement:")
# "; line 1 pos 14" (analysis) or "(line 1, pos 0)" (parse).
_ANALYSIS_POS = re.compile(r";\s*line (?P<line>\d+) pos (?P<pos>\d+)\s*(?:;|$)")
_PARSE_POS = re.compile(r"\(line (?P<line>\d+), pos (?P<pos>\d+)\)")
# Sentences of Spark's messages that only say what any user knows.
_BOILERPLATE = (
    re.compile(r"\s*Verify the spelling and correctness of the schema and catalog\..*", re.DOTALL),
    re.compile(r"\s*If you did not qualify the name.*", re.DOTALL),
)
_CODES = {
    "TABLE_OR_VIEW_NOT_FOUND": (NoSuchTableError.sqlstate, NoSuchTableError.error_code),
    "UNRESOLVED_COLUMN": (NoSuchColumnError.sqlstate, NoSuchColumnError.error_code),
    "PARSE_SYNTAX_ERROR": (SqlSyntaxError.sqlstate, SqlSyntaxError.error_code),
}
_REFUSED = "java.lang.SecurityException: permission denied: "
# StatementDeadline.java stops a statement's thread that plans past its deadline: nothing else
# in the server calls Thread.stop, so the Thrift Server's "Error running query: java.lang.ThreadDeath"
# means that.
_STOPPED = "java.lang.ThreadDeath"
STOPPED_MESSAGE = ("statement stopped: it ran longer than its time limit (tierlake.query.reader-timeout for a "
                   "reader, tierlake.query.timeout for everyone) while Spark was planning it on the driver, "
                   "outside any job (a constant expression the analyser or the optimizer evaluates)")
STOPPED_SQLSTATE = "57014"
_SQL_SECTION = re.compile(r"== SQL ==\s*\n(?P<sql>.*?)(?:\n\s*\^+|$)", re.DOTALL)
_UNQUALIFIED_CALL = re.compile(r"^\s*CALL\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\(", re.IGNORECASE)


def readable(message: str | None, sqlstate: str | None, error_code: int | None) -> tuple[str, str | None, int] | None:
    """``(message, sqlstate, error_code)`` for a Spark error with an error
    class (one short line: no Java class names, plan or stack), else None (left
    as Spark sent it)."""
    if not message:
        return None
    text = message
    for prefix in ("org.apache.hive.service.cli.HiveSQLException:", *_PREFIXES):
        text = text.strip()
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.strip()
    if text.split("\n", 1)[0].strip() == _STOPPED:
        return STOPPED_MESSAGE, STOPPED_SQLSTATE, int(error_code or 0)
    if text.startswith(_REFUSED):
        # AuthzCheck's refusal on Spark's resolved plan (a SecurityException, no error class): the
        # gateway's own permission error, one line, whichever check refused.
        refused = text[len(_REFUSED) - len("permission denied: "):].split("\n", 1)[0].strip()
        return refused, PermissionDeniedError.sqlstate, PermissionDeniedError.error_code
    first = _CLASS.match(text)
    if first is None:
        return None  # a task's failure, a Java error: the clients' own cleaning keeps working on it
    cls = first.group("cls")
    body = text[first.end():].split("\n\tat ", 1)[0]
    body = _JAVA.sub("", body).strip()
    if body.startswith(f"[{cls}]"):  # "[X] java.Class: [X] text": the tag once
        body = body[len(cls) + 2:].strip()
    sql = _SQL_SECTION.search(body)
    position = None
    pos = _ANALYSIS_POS.search(body) or _PARSE_POS.search(body)
    if pos is not None:
        position = f"line {pos.group('line')}, pos {pos.group('pos')}"
        body = body[:pos.start()]
    body = body.split("\n== SQL ==", 1)[0]
    for sentence in _BOILERPLATE:
        body = sentence.sub("", body)
    lines = [line.strip() for line in body.strip().splitlines() if line.strip()]
    if not lines:
        return None
    short = " ".join(lines) if cls.startswith("PARSE_") else lines[0]
    short = short.rstrip(".").strip()
    text = f"[{cls}] {short}" + (f" ({position})" if position else "")
    hint = _hint(cls, sql.group("sql") if sql else "")
    if hint:
        text = f"{text}; {hint}"
    state, code = _CODES.get(cls.split(".")[0], (sqlstate, error_code or 0))
    return text, state or sqlstate, int(code or 0)


def _hint(cls: str, sql: str) -> str | None:
    if cls == "PARSE_SYNTAX_ERROR":
        call = _UNQUALIFIED_CALL.match(sql)
        if call is not None:
            name = call.group("name")
            return (f"tierlake's procedures are called with their namespace: CALL sys.{name}(…) "
                    "(sys.procedures lists them)")
    return None


def readable_call_error(statement: str, message: str) -> str:
    """A CALL the gateway could not tokenize: sqlglot's message shows a window
    of the text that starts anywhere (``Error tokenizing 'ALL sys.…'``); say
    what was sent, and the quoting rule that trips most people."""
    if not message.startswith("cannot parse CALL: Error tokenizing"):
        return message
    shown = statement.strip()
    shown = shown if len(shown) <= 200 else shown[:200] + "…"
    return (f"cannot parse CALL: {shown} is not valid SQL. In Spark SQL a quote inside a string literal ends it: "
            "write \\' for a quote inside a literal, or use double quotes for a string inside a query "
            "(CALL sys.create_table_as('db.t', 'SELECT \"x\" AS a'))")
