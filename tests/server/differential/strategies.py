"""Hypothesis strategies of the differential harness (issue 50 item 5): tiered tables with generated
schemas and hostile names, and change streams written by every statement form.

Everything a case writes is SQL text: a value is drawn as a Spark SQL literal, cast to its column's
type, so tierlake's statements and the plain-Spark reference parse the very same text. Nothing here
imports tierlake: the harness quotes, escapes and renders on its own, so a quoting bug in tierlake
cannot hide behind the same helper on both sides.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from hypothesis import strategies as st

# -- names ---------------------------------------------------------------------------------------

# Aliases and helper columns tierlake's templates and Java classes use, metadata-like columns of
# Iceberg and of the stream, reserved words, and characters that need quoting.
TEMPLATE_ALIASES = ["d", "l", "p", "w", "f", "s", "t", "ranked", "winners", "checked", "judged", "compared",
                    "merged", "problem", "position", "bucket", "rows", "total", "detail",
                    # tierlake reserves names starting with __tierlake (refused at CREATE): one, mixed case
                    "__TierLake_Rank"]
METADATA_LIKE = ["_file", "_pos", "_spec_id", "_partition", "_deleted", "_change_type_", "__change_type",
                 "change_type", "_CHANGE_ORDINAL", "_commit_snapshot_id", "file_path", "sequence_number",
                 "snapshot_id", "record_count"]
RESERVED = ["select", "from", "order", "group", "table", "key", "value", "values", "null", "true", "user",
            "current_date", "all", "as", "by", "case", "end", "join", "where", "window", "partition"]
QUOTING = ["a`b", "``", "my col", "a.b", "a:b", "x:y:z", "o'k", 'say"hi', "semi;colon", "dash-ed", "q?",
           "a/b", "ключ", "名前", "é", "Ünïcödé", "MixedCase", "ID", "Sélect", "a  b"]
HOSTILE = TEMPLATE_ALIASES + METADATA_LIKE + RESERVED + QUOTING
# Only log tables may have a column named like the stream's change-type column (a primary-key
# stream adds its own ``_change_type``; see docs/tiering.md).
LOG_ONLY = ["_change_type", "_Change_Type"]

# Property values list key columns comma-separated (docs/tiering.md, "Property checks"), so a key or
# sequence-by column is never named with a comma or with leading/trailing blanks.
# Half the names are plain ones, listed first: Hypothesis shrinks towards them, so a minimal example
# keeps a hostile name only when the divergence needs it.
PLAIN = ["k", "v", "x", "y", "z", "k2", "v2"]
names = st.one_of(st.sampled_from(PLAIN), st.sampled_from(HOSTILE))
IDENTIFIER_LIKE = [n for n in HOSTILE if re.match(r"^[A-Za-z_]\w*$", n)]
table_names = st.one_of(st.just("t"), st.sampled_from(HOSTILE))


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def string_literal(text: str) -> str:
    """A Spark SQL string literal (Spark unescapes backslashes in literals by default)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- types ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlType:
    ddl: str
    kind: str  # bool int float decimal string binary date timestamp ntz array map struct
    children: tuple = ()
    bits: int = 0          # int: 8/16/32/64; float: 32/64
    precision: int = 0
    scale: int = 0

    @property
    def primitive(self) -> bool:
        return self.kind not in ("array", "map", "struct")

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float", "decimal")

    @property
    def orderable(self) -> bool:
        """min/max apply (Spark orders every primitive type)."""
        return self.primitive


INT_TYPES = [SqlType("TINYINT", "int", bits=8), SqlType("SMALLINT", "int", bits=16),
             SqlType("INT", "int", bits=32), SqlType("BIGINT", "int", bits=64)]
SIMPLE_TYPES = [*INT_TYPES, SqlType("BOOLEAN", "bool"), SqlType("FLOAT", "float", bits=32),
                SqlType("DOUBLE", "float", bits=64), SqlType("STRING", "string"), SqlType("BINARY", "binary"),
                SqlType("DATE", "date"), SqlType("TIMESTAMP", "timestamp"), SqlType("TIMESTAMP_NTZ", "ntz")]


@st.composite
def decimal_types(draw):
    precision = draw(st.sampled_from([1, 5, 10, 18, 19, 28, 38]))
    scale = draw(st.sampled_from(sorted({0, 1, min(2, precision), precision // 2, precision})))
    return SqlType(f"DECIMAL({precision},{scale})", "decimal", precision=precision, scale=scale)


def _or_decimal(choices: list[SqlType]) -> st.SearchStrategy[SqlType]:
    """One of ``choices`` or a DECIMAL, each kind as likely."""
    return st.sampled_from([*choices, None]).flatmap(lambda t: decimal_types() if t is None else st.just(t))


primitive_types = _or_decimal(SIMPLE_TYPES)
# Types a sequence-by column may have: ordered, and ordered the same in every engine.
sequence_types = _or_decimal([*INT_TYPES, SqlType("DOUBLE", "float", bits=64), SqlType("DATE", "date"),
                              SqlType("TIMESTAMP", "timestamp"), SqlType("STRING", "string")])
# Map keys and values stay away from floating point: Spark has no equality for maps, so the harness
# compares them as sorted entries, which must not depend on -0.0/NaN spelling.
MAP_KEY_TYPES = [SqlType("INT", "int", bits=32), SqlType("STRING", "string")]
MAP_VALUE_TYPES = [SqlType("INT", "int", bits=32), SqlType("STRING", "string"), SqlType("BOOLEAN", "bool")]


def array_of(element: SqlType) -> SqlType:
    return SqlType(f"ARRAY<{element.ddl}>", "array", (element,))


def map_of(key: SqlType, value: SqlType) -> SqlType:
    return SqlType(f"MAP<{key.ddl}, {value.ddl}>", "map", (key, value))


@st.composite
def struct_types(draw):
    fields = draw(st.lists(names, min_size=1, max_size=3, unique_by=str.lower))
    types = [draw(st.one_of(primitive_types, primitive_types.map(array_of))) for _ in fields]
    ddl = "STRUCT<" + ", ".join(f"{quote(n)}: {t.ddl}" for n, t in zip(fields, types, strict=True)) + ">"
    return SqlType(ddl, "struct", tuple(zip(fields, types, strict=True)))


value_types = st.one_of(
    primitive_types, primitive_types,
    primitive_types.map(array_of),
    st.builds(map_of, st.sampled_from(MAP_KEY_TYPES), st.sampled_from(MAP_VALUE_TYPES)),
    struct_types(),
)

# -- values (SQL literal text, never NULL; NULLs are drawn by the callers) -----------------------------

SPECIAL_FLOATS = ["NaN", "Infinity", "-Infinity", "0.0", "-0.0", "1.0", "-1.5"]


def _ts_text(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f").rjust(26, "0")


STRING_ALPHABET = st.sampled_from(list("aZ0 '\"\\`;-.,:%_\n") + ["é", "名", "🙂", "\u2028", "\u0000"])


def literals(t: SqlType) -> st.SearchStrategy[str]:
    """Non-NULL SQL literal text of type ``t`` (cast to it)."""
    if t.kind == "bool":
        return st.sampled_from(["true", "false"])
    if t.kind == "int":
        lo, hi = -(2 ** (t.bits - 1)), 2 ** (t.bits - 1) - 1
        ints = st.one_of(st.sampled_from([0, 1, -1, lo, hi]), st.integers(lo, hi))
        return ints.map(lambda n: f"CAST({n} AS {t.ddl})")
    if t.kind == "float":
        finite = st.floats(width=t.bits, allow_nan=False, allow_infinity=False).map(repr)
        return st.one_of(st.sampled_from(SPECIAL_FLOATS), finite).map(lambda x: f"CAST('{x}' AS {t.ddl})")
    if t.kind == "decimal":
        top = 10 ** t.precision - 1
        unscaled = st.one_of(st.sampled_from([0, 1, -1, top, -top]), st.integers(-top, top))

        def text(n: int) -> str:
            # Exact at any precision (decimal's default context would round to 28 digits).
            digits = str(abs(n)).rjust(t.scale + 1, "0")
            whole, frac = digits[: len(digits) - t.scale], digits[len(digits) - t.scale:]
            sign = "-" if n < 0 else ""
            return f"CAST('{sign}{whole}{'.' + frac if t.scale else ''}' AS {t.ddl})"
        return unscaled.map(text)
    if t.kind == "string":
        return st.text(STRING_ALPHABET, max_size=5).map(string_literal)
    if t.kind == "binary":
        return st.binary(max_size=4).map(lambda b: f"X'{b.hex().upper()}'")
    if t.kind == "date":
        dates = st.one_of(st.sampled_from([dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(1, 1, 1),
                                           dt.date(9999, 12, 31), dt.date(1582, 10, 4)]),
                          st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)))
        return dates.map(lambda d: f"DATE'{d.isoformat().rjust(10, '0')}'")
    if t.kind in ("timestamp", "ntz"):
        prefix = "TIMESTAMP" if t.kind == "timestamp" else "TIMESTAMP_NTZ"
        times = st.one_of(st.sampled_from([dt.datetime(1970, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                                           dt.datetime(1900, 1, 1), dt.datetime(2038, 1, 19, 3, 14, 8)]),
                          st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30)))
        return times.map(lambda v: f"{prefix}'{_ts_text(v)}'")
    if t.kind == "array":
        (element,) = t.children
        items = st.lists(st.one_of(st.just(f"CAST(NULL AS {element.ddl})"), literals(element)), max_size=3)
        return items.map(lambda xs: f"CAST(array({', '.join(xs)}) AS {t.ddl})")
    if t.kind == "map":
        key, value = t.children
        entries = st.lists(st.tuples(literals(key), st.one_of(st.just(f"CAST(NULL AS {value.ddl})"),
                                                               literals(value))),
                           max_size=3, unique_by=lambda kv: kv[0])
        return entries.map(lambda kvs: f"CAST(map({', '.join(k + ', ' + v for k, v in kvs)}) AS {t.ddl})")
    if t.kind == "struct":
        parts = [nullable(ft) for _, ft in t.children]
        return st.tuples(*parts).map(lambda xs: f"CAST(struct({', '.join(xs)}) AS {t.ddl})")
    raise AssertionError(t)


def null_of(t: SqlType) -> str:
    return f"CAST(NULL AS {t.ddl})"


def nullable(t: SqlType) -> st.SearchStrategy[str]:
    return st.one_of(st.just(null_of(t)), literals(t), literals(t), literals(t))


# -- cases ---------------------------------------------------------------------------------------

CHANGE_TYPES = ["+I", "-U", "+U", "-D", None]
FORMS = ["values", "select"]          # CTAS: first commit only
# How a commit is sent (one tierlake.write.request-id, two attempts; harness._Case.send): None once;
# sequential (a second connection after the first is answered); concurrent (two at once); restart (the
# second after the process's committers are dropped, as a new server's: the id is found in the snapshot);
# retention (the second once the id's retention has passed and the case's next commit has made the
# committer prune its ids: found in the snapshot, which is kept);
# cancelled (the first cancelled by its client after `delay` seconds); disconnected (the first's
# connection dropped after `delay` seconds, the client gone). Each must leave the rows exactly once.
RETRIES = [None, None, None, None, "sequential", "concurrent", "restart", "retention", "cancelled", "disconnected"]
DELAYS = [0.0, 0.05, 0.2, 0.6]  # seconds before a cancel or a disconnect


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType


@dataclass
class Commit:
    form: str                       # values | select | ctas
    retry: str | None               # None | one of RETRIES (one tierlake.write.request-id sent twice)
    rows: list[tuple]               # (literal per column..., change type or None)
    delay: float = 0.0              # cancelled, disconnected: seconds before the first attempt is given up


@dataclass
class Case:
    table: str
    columns: list[Column]
    keys: list[str]                 # empty: a log table
    sequence_by: str | None
    commits: list[Commit]
    cut: int                        # commits[:cut] are tiered by a round before the rest is written
    notes: list[str] = field(default_factory=list)
    name: str = "generated"

    @property
    def pk(self) -> bool:
        return bool(self.keys)

    def describe(self) -> str:
        cols = ", ".join(f"{quote(c.name)} {c.type.ddl}" for c in self.columns)
        out = [f"table {quote(self.table)} ({cols})"
               + (f" primary-key {self.keys!r}" if self.keys else " log")
               + (f" sequence-by {self.sequence_by!r}" if self.sequence_by else "")
               + f"; round after commit {self.cut}"]
        for i, c in enumerate(self.commits):
            out.append(f"  commit {i}: {c.form}" + (f" retried {c.retry}" if c.retry else "")
                       + (f" after {c.delay} s" if c.retry in ("cancelled", "disconnected") else ""))
            for r in c.rows:
                out.append("    (" + ", ".join(r[:-1]) + f") {r[-1]!r}")
        return "\n".join(out)


@st.composite
def cases(draw, max_commits: int = 4, max_rows: int = 4):
    pk = draw(st.booleans())
    table = draw(table_names)
    n_keys = draw(st.integers(1, 2)) if pk else 0
    n_values = draw(st.integers(0 if pk else 1, 3))
    pool = st.one_of(st.sampled_from(PLAIN), st.sampled_from(HOSTILE if pk else HOSTILE + LOG_ONLY))
    # Key and sequence-by columns are named in property values (comma-separated names): mostly names
    # that read as identifiers there, sometimes any name (tierlake refuses those at CREATE; harness.py).
    special = n_keys + (1 if pk and n_values else 0)
    named = st.one_of(st.sampled_from(PLAIN), st.sampled_from(IDENTIFIER_LIKE), pool)
    column_names = draw(st.lists(named, min_size=special, max_size=special, unique_by=str.lower))
    column_names += draw(st.lists(pool, min_size=n_keys + n_values - special,
                                  max_size=n_keys + n_values - special,
                                  unique_by=str.lower).filter(
        lambda more: not {m.lower() for m in more} & {c.lower() for c in column_names}))
    key_types = [draw(primitive_types) for _ in range(n_keys)]
    value_types_ = [draw(value_types) for _ in range(n_values)]
    sequence_by = None
    if pk and n_values and draw(st.booleans()):
        # The sequence-by column is one of the value columns, of an ordered type.
        value_types_[0] = draw(sequence_types)
        sequence_by = column_names[n_keys]
    columns = [Column(n, t) for n, t in zip(column_names, key_types + value_types_, strict=True)]
    keys = column_names[:n_keys]

    # Few distinct keys and sequence values: repeated keys and ties are the point.
    key_pool = draw(st.lists(st.tuples(*[literals(t) for t in key_types]), min_size=1, max_size=3)) if pk else []
    seq_pool = draw(st.lists(nullable(value_types_[0]), min_size=1, max_size=3)) if sequence_by else []

    def row(force_upsert: bool) -> st.SearchStrategy[tuple]:
        parts = []
        if pk:
            parts.append(st.sampled_from(key_pool))
        for i, c in enumerate(columns[n_keys:]):
            parts.append(st.sampled_from(seq_pool) if sequence_by and i == 0 else nullable(c.type))
        change = st.just(None) if (force_upsert or not pk) else st.sampled_from(CHANGE_TYPES)

        def flat(xs):
            head = list(xs[0]) if pk else [xs[0]]
            return tuple(head + list(xs[1:-1])) + (xs[-1],)
        return st.tuples(*parts, change).map(flat) if pk else st.tuples(*parts, change)

    commits = []
    for i in range(draw(st.integers(1, max_commits))):
        form = draw(st.sampled_from(FORMS + (["ctas"] if i == 0 else [])))
        # A CTAS into a primary-key table writes upserts (the query gives no change type).
        rows = draw(st.lists(row(form == "ctas"), min_size=1, max_size=max_rows))
        retry = None if form == "ctas" else draw(st.sampled_from(RETRIES))
        delay = draw(st.sampled_from(DELAYS)) if retry in ("cancelled", "disconnected") else 0.0
        commits.append(Commit(form, retry, rows, delay))
    cut = draw(st.integers(0, len(commits)))
    return Case(table, columns, keys, sequence_by, commits, cut)


# -- explicit cases: the reproductions of issue 50 the harness must catch ------------------------------

_INT, _DOUBLE = SqlType("INT", "int", bits=32), SqlType("DOUBLE", "float", bits=64)
_BINARY = SqlType("BINARY", "binary")


def _pk_case(name: str, columns: list[Column], keys: list[str], commits: list[list[tuple]], cut: int = 1) -> Case:
    return Case("t", columns, keys, None, [Commit("values", None, rows) for rows in commits], cut, name=name)


EXPLICIT_CASES = [
    # BINARY keys compared by content: two pending changes of a tiered key, one winner.
    _pk_case("binary-key", [Column("k", _BINARY), Column("v", _INT)], ["k"],
             [[("X'AA'", "CAST(1 AS INT)", "+I")], [("X'AA'", "CAST(2 AS INT)", "+U")],
              [("X'AA'", "CAST(3 AS INT)", "+U")]]),
    # -0.0 = 0.0 and NaN = NaN in a (second) key column, tiered and in two pending commits.
    _pk_case("zero-and-nan-keys", [Column("k", _INT), Column("k2", _DOUBLE), Column("v", _INT)], ["k", "k2"],
             [[("CAST(1 AS INT)", "CAST('0.0' AS DOUBLE)", "CAST(1 AS INT)", "+I"),
               ("CAST(1 AS INT)", "CAST('NaN' AS DOUBLE)", "CAST(1 AS INT)", "+I")],
              [("CAST(1 AS INT)", "CAST('-0.0' AS DOUBLE)", "CAST(2 AS INT)", "+U"),
               ("CAST(1 AS INT)", "CAST('NaN' AS DOUBLE)", "CAST(2 AS INT)", "+U")],
              [("CAST(1 AS INT)", "CAST('0.0' AS DOUBLE)", "CAST(3 AS INT)", "+U"),
               ("CAST(1 AS INT)", "CAST('NaN' AS DOUBLE)", "CAST(3 AS INT)", "+U")]]),
    # A column named like a template alias.
    Case("t", [Column("d", _INT)], [], None, [Commit("values", None, [("CAST(1 AS INT)", None)])], 0,
         name="column-named-d"),
    # A table named with a reserved word.
    Case("where", [Column("v", _INT)], [], None, [Commit("values", None, [("CAST(1 AS INT)", None)])], 1,
         name="table-named-where"),
    # One request id sent twice: INSERT … SELECT, sequentially and concurrently.
    Case("t", [Column("v", _INT)], [], None, [Commit("select", "sequential", [("CAST(1 AS INT)", None)])], 0,
         name="select-retried-sequentially"),
    Case("t", [Column("v", _INT)], [], None, [Commit("select", "concurrent", [("CAST(1 AS INT)", None)])], 0,
         name="select-retried-concurrently"),
    # Retried after a restart, after the id's retention, after a cancel, after the client went away; and
    # the two cases of the long run (seed 5) a round or a CTAS failed on.
    Case("t", [Column("v", _INT)], [], None, [Commit("values", "restart", [("CAST(1 AS INT)", None)]),
                                              Commit("select", "restart", [("CAST(2 AS INT)", None)])], 1,
         name="retried-after-a-restart"),
    Case("t", [Column("v", _INT)], [], None, [Commit("select", "retention", [("CAST(1 AS INT)", None)]),
                                              Commit("values", "retention", [("CAST(2 AS INT)", None)]),
                                              Commit("values", None, [("CAST(3 AS INT)", None)])], 0,
         name="retried-after-the-retention"),
    Case("t", [Column("v", _INT)], [], None, [Commit("select", "cancelled", [("CAST(1 AS INT)", None)], 0.05),
                                              Commit("values", "cancelled", [("CAST(2 AS INT)", None)], 0.0)], 0,
         name="retried-after-a-cancel"),
    Case("t", [Column("v", _INT)], [], None, [Commit("select", "disconnected", [("CAST(1 AS INT)", None)], 0.2),
                                              Commit("values", "disconnected", [("CAST(2 AS INT)", None)], 0.0)], 0,
         name="retried-after-a-disconnect"),
    Case("a/b", [Column("z", SqlType("STRING", "string"))], ["z"], None,
         [Commit("values", None, [("'a'", "+I")]), Commit("select", None, [("'a'", "+U")])], 2,
         name="pk-table-named-a-slash-b"),
    Case("t", [Column("y", SqlType("STRUCT<`select`: DOUBLE>", "struct", (("select", _DOUBLE),)))], [], None,
         [Commit("ctas", None, [("CAST(struct(CAST('1.0' AS DOUBLE)) AS STRUCT<`select`: DOUBLE>)", None)])], 1,
         name="ctas-struct-field-select"),
]
