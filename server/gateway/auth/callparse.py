"""Parsing of ``CALL sys.<name>(args)`` statements.

sqlglot has no CALL grammar (it falls back to ``exp.Command``), so the
statement is tokenized to find the procedure name and the argument list, and
the argument list is parsed as the arguments of a function call. Arguments
are evaluated to Python values here; nothing in them is ever executed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from tierlake.server.exceptions import SqlSyntaxError
from tierlake.server.sqlapi.types import SqlMap, SqlStruct

DIALECT = "spark"
NAMESPACE = "sys"
_PLACEHOLDER = "__tierlake_call__"

# sqlglot warns "contains unsupported syntax" for every CALL it cannot parse;
# that is expected here and would otherwise flood the server log.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


@dataclass
class CallStatement:
    """A parsed CALL: ``name`` without the ``sys.`` prefix, Python arguments."""

    name: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


def _tokenize(sql: str):
    """Tokens of a CALL, with the text after CALL tokenized as well.

    The Spark tokenizer treats CALL as a command keyword and returns the rest
    of the statement as one string token, so the rest is tokenized again.
    Token offsets are shifted back to positions in ``sql``.
    """
    dialect = sqlglot.Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(sql)
        if not tokens or tokens[0].text.upper() != "CALL":
            return tokens
        offset = tokens[0].end + 1
        rest = dialect.tokenize(sql[offset:])
    except (TokenError, ValueError) as e:
        raise SqlSyntaxError(f"cannot parse CALL: {str(e).splitlines()[0]}") from None
    for tok in rest:
        tok.start += offset
        tok.end += offset
    return [tokens[0], *rest]


# How far is_sys_call looks for CALL: a leading comment longer than this is
# not how a procedure call is written, and the answer must cost little for
# any text the authoriser and the handler ask about.
CALL_PREFIX_LIMIT = 64 * 1024


_BLANK = " \t\n\r\f\v"


def _line_end(sql: str, i: int, end: int) -> int:
    """Where a ``--`` comment whose text starts at ``i`` ends (past its line end)."""
    while True:
        newline = sql.find("\n", i, end)
        stop = end if newline < 0 else newline
        carriage = sql.find("\r", i, stop)
        if carriage >= 0:
            return carriage + 1
        if newline < 0:
            return end
        if sql[newline - 1] != "\\":
            return newline + 1
        i = newline + 1  # `\` + newline: the comment goes on


def _comment_end(sql: str, i: int, end: int) -> int:
    """Where a ``/*`` comment whose text starts at ``i`` ends, -1 if unclosed.
    Each character is looked at a bounded number of times."""
    depth, close = 1, -1
    while depth:
        if close < i:
            close = sql.find("*/", i, end)
            if close < 0:
                return -1
        opening = sql.find("/*", i, close + 1)
        if opening < 0:
            depth, i = depth - 1, close + 2
        elif sql.startswith("/*+", opening):
            i = opening + 2
        else:
            depth, i = depth + 1, opening + 2
    return i


def _skip_blank(sql: str, i: int, end: int) -> int:
    """The position of the first character at or after ``i`` that is not
    whitespace or a comment (``end`` if none before it, -1 in an unclosed
    comment). Spark's lexer rules: ``--`` runs to the end of the line (a
    ``\\`` before the newline continues it); ``/* */`` nests, except at
    ``/*+`` (a hint opener inside a comment is text)."""
    while 0 <= i < end:
        if sql[i] in _BLANK:
            i += 1
        elif sql.startswith("--", i):
            i = _line_end(sql, i + 2, end)
        elif sql.startswith("/*", i):
            i = _comment_end(sql, i + 2, end)
        else:
            return i
    return i if i < 0 else end


def _word_at(sql: str, i: int, word: str) -> int:
    """The position after ``word`` (any case, or back-quoted) at ``i``, or -1."""
    for text in (word, f"`{word}`"):
        stop = i + len(text)
        if sql[i:stop].lower() == text and not (stop < len(sql) and (sql[stop].isalnum() or sql[stop] == "_")):
            return stop
    return -1


def is_sys_call(sql: str) -> bool:
    """True for statements of the form ``CALL sys.…`` (even malformed ones:
    the gateway answers them with the error).

    Spark 3.5 cannot parse ``CALL sys.…`` (Iceberg's parser takes CALLs of
    its own procedures only), and such a statement never reaches Spark: the
    gateway runs the procedure, with the procedure's role, its arguments
    evaluated as literals. So this is decided on the leading text alone,
    with no tokenizer: at most :data:`CALL_PREFIX_LIMIT` characters of
    whitespace and comments are looked at, whatever the statement's size."""
    end = min(len(sql), CALL_PREFIX_LIMIT)
    i = _skip_blank(sql, 0, end)
    if i < 0 or i >= end or (i := _word_at(sql, i, "call")) < 0 or sql[i - 1] == "`":
        return False
    i = _skip_blank(sql, i, end)
    return 0 <= i < end and _word_at(sql, i, NAMESPACE) >= 0


@dataclass(frozen=True)
class CallHead:
    """What a CALL names, read without a tokenizer: the procedure (without
    ``sys.``) and how many arguments its list holds at the top level."""

    name: str
    arguments: int
    named: int = 0  # of them, given by name (``key => value``)

    @property
    def positional(self) -> int:
        return self.arguments - self.named


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _quoted_end(sql: str, i: int, end: int) -> int:
    """Where a literal or back-quoted name opened at ``i - 1`` ends (past its
    closing quote), -1 if unclosed. A backslash escapes in string literals,
    not in back-quoted names (where a doubled back quote is one)."""
    quote = sql[i - 1]
    while i < end:
        ch = sql[i]
        if ch == "\\" and quote != "`":
            i += 2
        elif ch == quote:
            if quote == "`" and sql.startswith("``", i):
                i += 2
                continue
            return i + 1
        else:
            i += 1
    return -1


def call_head(sql: str) -> CallHead | None:
    """The procedure a ``CALL sys.<name>(…)`` names and its number of
    top-level arguments, or None when the text is not of that shape (the full
    parse then reports why).

    Linear in the text and with no tokenizer, so that a CALL's role, its
    procedure and its arity are known before its arguments are parsed: a
    megabyte of ``array(1,1,…)`` sent to a procedure that takes none is
    refused in microseconds, not after a minute of sqlglot (issue 51)."""
    end = len(sql)
    i = _skip_blank(sql, 0, end)
    if i < 0 or i >= end or (i := _word_at(sql, i, "call")) < 0:
        return None
    i = _skip_blank(sql, i, end)
    if i < 0 or i >= end or (i := _word_at(sql, i, NAMESPACE)) < 0:
        return None
    i = _skip_blank(sql, i, end)
    if i < 0 or i >= end or sql[i] != ".":
        return None
    i = _skip_blank(sql, i + 1, end)
    if i < 0 or i >= end:
        return None
    if sql[i] == "`":
        stop = _quoted_end(sql, i + 1, end)
        if stop < 0:
            return None
        name, i = sql[i + 1 : stop - 1].replace("``", "`"), stop
    else:
        start = i
        while i < end and sql[i] in _NAME_CHARS:
            i += 1
        name = sql[start:i]
    i = _skip_blank(sql, i, end)
    if not name or i < 0 or i >= end or sql[i] != "(":
        return None
    depth, commas, named, empty, i = 1, 0, 0, True, i + 1
    while i < end and depth:
        ch = sql[i]
        if ch in _BLANK or sql.startswith("--", i) or sql.startswith("/*", i):
            i = _skip_blank(sql, i, end)
            if i < 0:
                return None
            continue
        if ch in "'\"`":
            i = _quoted_end(sql, i + 1, end)
            if i < 0:
                return None
            empty = False
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 1:
            commas += 1
        elif ch == "=" and depth == 1 and sql.startswith("=>", i):
            named += 1
        if depth:
            empty = False
        i += 1
    if depth:
        return None
    i = _skip_blank(sql, i, end)
    while 0 <= i < end and sql[i] == ";":
        i = _skip_blank(sql, i + 1, end)
    if i != end:
        return None
    return CallHead(name.lower(), 0 if empty else commas + 1, named)


def parse_call(sql: str) -> CallStatement:
    """Parse ``CALL sys.name(arg, key => value, ...)`` into a :class:`CallStatement`."""
    tokens = _tokenize(sql)
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        tokens.pop()
    if len(tokens) < 2 or tokens[0].text.upper() != "CALL":
        raise SqlSyntaxError("not a CALL statement")
    parts: list[str] = []
    i = 1
    while i < len(tokens) and tokens[i].token_type != TokenType.L_PAREN:
        tok = tokens[i]
        expect_name = len(parts) * 2 + 1 == i
        if expect_name and tok.token_type not in (
            TokenType.DOT,
            TokenType.L_PAREN,
            TokenType.R_PAREN,
            TokenType.STRING,
            TokenType.NUMBER,
            TokenType.SEMICOLON,
        ):
            parts.append(tok.text)
        elif not expect_name and tok.token_type == TokenType.DOT:
            pass
        else:
            raise SqlSyntaxError(f"cannot parse CALL: unexpected {tok.text!r} in the procedure name")
        i += 1
    if len(parts) != 2 or parts[0].lower() != NAMESPACE:
        raise SqlSyntaxError(
            "cannot parse CALL: expected CALL sys.<procedure>(<arguments>), "
            f"got a procedure name of {'.'.join(parts) or 'nothing'}"
        )
    if i >= len(tokens):
        raise SqlSyntaxError(f"cannot parse CALL: missing '(' after sys.{parts[1]}")
    if tokens[-1].token_type != TokenType.R_PAREN:
        raise SqlSyntaxError(f"cannot parse CALL: the argument list of sys.{parts[1]} is not closed with ')'")
    for before, after in zip(tokens[i:], tokens[i + 1:], strict=False):
        # Spark joins adjacent string literals ('a' 'b' is 'ab'), so a doubled
        # quote inside a literal is no escape: it ends the literal and starts
        # another. Written with no space in between, it was meant as one
        # literal; say so instead of running something else.
        if before.token_type == after.token_type == TokenType.STRING and after.start == before.end + 1:
            raise SqlSyntaxError(
                "cannot parse CALL: '' inside a string literal is not an escape in Spark SQL (it ends the "
                f"literal and starts another, so {before.text!r} and {after.text!r} would be joined as "
                f"{before.text + after.text!r}); write \\' for a quote inside a literal, or use double quotes "
                'for a string inside a query ("click")')
    depth = 0
    previous = None
    for tok in tokens[i:]:
        # sqlglot silently drops empty arguments ("f(1,,2)" parses as f(1, 2)).
        if (
            tok.token_type in (TokenType.COMMA, TokenType.R_PAREN)
            and previous
            in (
                TokenType.COMMA,
                TokenType.L_PAREN,
            )
            and not (tok.token_type == TokenType.R_PAREN and previous == TokenType.L_PAREN)
        ):
            raise SqlSyntaxError(f"cannot parse the arguments of sys.{parts[1]}: empty argument")
        previous = tok.token_type
        depth += tok.token_type == TokenType.L_PAREN
        depth -= tok.token_type == TokenType.R_PAREN
        if depth == 0 and tok is not tokens[-1]:
            raise SqlSyntaxError(f"cannot parse CALL: unexpected text after the argument list of sys.{parts[1]}")
    inner = sql[tokens[i].end + 1 : tokens[-1].start]
    try:
        select = sqlglot.parse_one(f"SELECT {_PLACEHOLDER}({inner})", read=DIALECT)
    except (ParseError, TokenError) as e:
        first = str(e).splitlines()[0] if str(e) else "syntax error"
        raise SqlSyntaxError(f"cannot parse the arguments of sys.{parts[1]}: {first}") from None
    except RecursionError:
        raise SqlSyntaxError(f"cannot parse the arguments of sys.{parts[1]}: nested too deeply") from None
    except (IndexError, ValueError, TypeError):
        # sqlglot's builders raise these on some malformed calls, e.g. map(1).
        raise SqlSyntaxError(f"cannot parse the arguments of sys.{parts[1]}: malformed function call") from None
    projections = select.expressions if isinstance(select, exp.Select) else []
    if len(projections) != 1 or not isinstance(projections[0], exp.Anonymous) or select.args.get("from"):
        raise SqlSyntaxError(f"cannot parse the arguments of sys.{parts[1]}")
    call = CallStatement(name=parts[1].lower())
    for position, arg in enumerate(projections[0].expressions, start=1):
        if isinstance(arg, (exp.Kwarg, exp.PropertyEQ)):
            key = arg.this.name.lower()
            if not key:
                raise SqlSyntaxError(f"argument {position}: a named argument needs a name before '=>'")
            if key in call.kwargs:
                raise SqlSyntaxError(f"argument {key!r} is given more than once")
            call.kwargs[key] = evaluate(arg.expression, f"argument {key!r}")
        else:
            if call.kwargs:
                raise SqlSyntaxError(f"argument {position}: positional arguments must come before named ones")
            call.args.append(evaluate(arg, f"argument {position}"))
    return call


_INT_TYPES = {"BIGINT", "INT", "SMALLINT", "TINYINT"}
_FLOAT_TYPES = {"DOUBLE", "FLOAT"}


def evaluate(node: exp.Expression, where: str) -> Any:
    """Evaluate a literal expression; anything that is not a literal is rejected."""
    if isinstance(node, exp.Paren):
        return evaluate(node.this, where)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        return _number(node.this, where)
    if isinstance(node, exp.Neg):
        value = evaluate(node.this, where)
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            return -value
        raise SqlSyntaxError(f"{where}: '-' applies to numbers only")
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return _cast(evaluate(node.this, where), node.to, where)
    if isinstance(node, exp.Array):
        return [evaluate(e, f"{where}[{i}]") for i, e in enumerate(node.expressions)]
    if isinstance(node, exp.VarMap):
        keys = [evaluate(k, f"{where} key") for k in node.args["keys"].expressions]
        values = [evaluate(v, f"{where} value") for v in node.args["values"].expressions]
        out = SqlMap()
        for k, v in zip(keys, values, strict=False):
            if isinstance(k, (list, dict)) or k is None:
                raise SqlSyntaxError(f"{where}: map keys must be non-NULL scalars")
            out[k] = v
        return out
    if isinstance(node, exp.Struct):
        out = SqlStruct()
        for e in node.expressions:
            if not isinstance(e, exp.PropertyEQ):
                raise SqlSyntaxError(f"{where}: use named_struct('field', value, ...)")
            out[e.this.name] = evaluate(e.expression, f"{where}.{e.this.name}")
        return out
    if isinstance(node, exp.Concat) and all(isinstance(e, exp.Literal) and e.is_string for e in node.expressions):
        # Spark concatenates adjacent string literals: 'it''s' is "its".
        return "".join(e.this for e in node.expressions)
    if isinstance(node, exp.Anonymous) and node.name.lower() == "map" and not node.expressions:
        return SqlMap()
    raise SqlSyntaxError(
        f"{where}: only literals, array(...), map(...) and named_struct(...) are allowed, "
        f"got {node.sql(dialect=DIALECT)[:80]!r}"
    )


def _number(text: str, where: str) -> int | float | Decimal:
    try:
        if any(c in text for c in ".eE"):
            value = float(text)
            if value in (float("inf"), float("-inf")):
                raise SqlSyntaxError(f"{where}: {text} is out of the range of DOUBLE")
            return value
        return int(text)
    except ValueError:
        raise SqlSyntaxError(f"{where}: not a number: {text!r}") from None


def _cast(value: Any, to: exp.DataType, where: str) -> Any:
    target = to.this.name if hasattr(to.this, "name") else str(to.this)
    try:
        if value is None:
            return None
        if target in _INT_TYPES:
            if isinstance(value, bool):
                return int(value)
            if isinstance(value, float) and value != int(value):
                raise ValueError(value)
            return int(value)
        if target in _FLOAT_TYPES or target == "DECIMAL":
            return float(value)
        if target in ("VARCHAR", "TEXT", "CHAR", "STRING"):
            return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        if target == "BOOLEAN":
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if isinstance(value, bool):
                return value
    except (ValueError, TypeError, OverflowError):
        raise SqlSyntaxError(f"{where}: cannot cast {value!r} to {target}") from None
    raise SqlSyntaxError(f"{where}: casts to {target} are not supported in CALL arguments")
