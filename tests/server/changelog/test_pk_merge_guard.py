"""The primary-key MERGE enforces the changelog rule itself
(sql/templates/tiering_pk_merge.sql.j2, ``validation.GUARD``): generated
chunks against the changelog check query (changelog_check.sql.j2, which
writes the error text) and the pure-Python reference model
(tests/server/changelog/reference_model.py).

For every chunk: the MERGE fails with the guard ⇔ the check query finds a
problem ⇔ the model finds a violation in one of its commits; a refused MERGE
leaves the target as it was, an accepted one leaves the model's state.
The statements are the real templates run on temporary views shaped as
``lake_write.ChangelogWrite`` makes them (the chunk's rows with their
``_file``, and the files with their data sequence numbers).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from tests.server.changelog.reference_model import Change, replay
from tierlake import sql
from tierlake.server.catalog.spec import CHANGE_TYPE, CHANGE_TYPES
from tierlake.server.changelog.lake_write import T_PK_MERGE
from tierlake.server.changelog.validation import GUARD, SHOWN, T_CHANGELOG_CHECK

pytestmark = pytest.mark.integration

DB = "pk_merge_guard"
INITIAL = {(1,): (1, 9.0, 0), (2,): (2, 9.0, 0)}  # rows the chunk can update and delete
_counter = itertools.count()


def _views(spark, commits: list[list[tuple]], schema: str) -> tuple[str, str]:
    """The chunk as ChangelogWrite's views: commit ``i`` is file ``f<i>`` with data sequence number ``i + 1``."""
    n = next(_counter)
    delta, files = f"__guard_delta_{n}", f"__guard_files_{n}"
    rows = [row + (f"f{i}",) for i, commit in enumerate(commits) for row in commit]
    spark.createDataFrame(rows, f"{schema}, _change_type STRING, _file STRING").createOrReplaceTempView(delta)
    spark.createDataFrame([(f"f{i}", i + 1) for i in range(len(commits))],
                          "file_path STRING, sequence_number BIGINT").createOrReplaceTempView(files)
    return delta, files


def _target(spark, schema: str, rows: list[tuple]) -> list[str]:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {DB}")
    name = f"t{next(_counter)}"
    # Merge-on-read, as lake and KV tables are created (create_lake_table.sql.j2): the MERGE's plan shape.
    spark.sql(f"CREATE TABLE {DB}.{name} ({schema}) USING iceberg TBLPROPERTIES ('format-version' = '2', "
              "'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
              "'write.delete.mode' = 'merge-on-read')")
    if rows:
        spark.createDataFrame(rows, schema).writeTo(f"{DB}.{name}").append()
    return [DB, name]


def _merge_and_check(spark, commits, schema, columns, sequence_by, initial, json_columns=()):
    """(the MERGE's error or None, the check query's problem rows, the target's rows after)."""
    delta, files = _views(spark, commits, schema)
    target = _target(spark, schema, initial)
    context = dict(delta=delta, files=files, columns=columns, json_columns=list(json_columns), keys=["id"],
                   sequence_by=sequence_by, change_type=CHANGE_TYPE, change_types=CHANGE_TYPES)
    try:
        problems = spark.sql(sql.render_checked(T_CHANGELOG_CHECK, shown=SHOWN, **context)).collect()
        error = None
        try:
            spark.sql(sql.render_checked(T_PK_MERGE, target=target, guard=GUARD, **context))
        except Exception as e:  # noqa: BLE001 - the assertion below names what it was
            error = str(e)
        after = spark.sql(f"SELECT {', '.join(columns)} FROM {sql.quote_table(*target)}").collect()
        return error, problems, after
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {sql.quote_table(*target)} PURGE")
        spark.catalog.dropTempView(delta)
        spark.catalog.dropTempView(files)


change = st.tuples(
    st.sampled_from([1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, None]),               # key, now and then NULL
    st.sampled_from([1.0, 2.0, 3.0]),                                         # value
    st.sampled_from([1, 2, 3, 4, 5, 6, None]),                                # sequence value, sometimes NULL
    st.sampled_from(["+I", "+U", "-U", "-D", "-D", None] * 3 + ["+X", "-d"]),  # change type, now and then unknown
)
chunks = st.lists(st.lists(change, min_size=1, max_size=6), min_size=1, max_size=3)


@settings(max_examples=16, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(commits=chunks, sequence_by=st.booleans())
def test_the_merge_refuses_exactly_what_the_check_and_the_model_refuse(spark, commits, sequence_by):
    model = replay([[Change((k,), (k, v, s), c, s if sequence_by else None) for k, v, s, c in commit]
                    for commit in commits], sequence_by, state=INITIAL)
    error, problems, after = _merge_and_check(
        spark, commits, "id BIGINT, v DOUBLE, seq BIGINT", ["id", "v", "seq"], "seq" if sequence_by else None,
        list(INITIAL.values()))
    refused = model.violation is not None
    event("refused" if refused else "merged")
    assert bool(problems) == refused, (problems, model.violation)
    if refused:
        assert error is not None and GUARD in error
        assert sorted(tuple(r) for r in after) == sorted(INITIAL.values())  # nothing committed
    else:
        assert error is None
        assert sorted(tuple(r) for r in after) == sorted(model.state.values())


# (commits, refused): one key, with sequence-by. Within a commit the MERGE compares each change with
# the one before it in (sequence-by DESC NULLS LAST) order; these are the orders where that is subtle.
SEQUENCED = [
    pytest.param([[(1, 1.0, 5, "+U"), (1, 2.0, None, "+U")]], True, id="a-NULL-sequence-value-with-a-difference"),
    pytest.param([[(1, 1.0, 5, "+U"), (1, 2.0, 3, "+U"), (1, 2.0, None, "+U")]], True,
                 id="the-difference-is-not-next-to-the-NULL"),
    pytest.param([[(1, 1.0, None, "-D"), (1, 2.0, None, "-D")]], False, id="two-deletes-with-NULL-are-one-effect"),
    pytest.param([[(1, 1.0, 5, "+U"), (1, 1.0, 5, "+U"), (1, 2.0, 5, "+U")]], True,
                 id="the-third-winning-change-differs"),
    pytest.param([[(1, 1.0, 5, "+U"), (1, 2.0, 4, "+U"), (1, 3.0, 4, "+U")]], False,
                 id="a-tie-below-the-winning-value-is-ordered"),
    pytest.param([[(1, 1.0, 5, "+U"), (1, 2.0, 4, "+U")], [(1, 3.0, 5, "+U"), (1, 4.0, 4, "+U")]], False,
                 id="ordered-changes-in-two-commits"),
    pytest.param([[(1, 4.0, 5, "+U"), (1, 5.0, 5, "+U")], [(1, 1.0, 6, "+U"), (1, 2.0, 5, "+U")]], True,
                 id="a-break-in-a-later-commit-does-not-order-an-earlier-one"),
]


@pytest.mark.parametrize("commits, refused", SEQUENCED)
def test_changes_ordered_by_sequence_by_within_a_commit(spark, commits, refused):
    model = replay([[Change((k,), (k, v, s), c, s) for k, v, s, c in commit] for commit in commits], True,
                   state=INITIAL)
    assert (model.violation is not None) == refused  # the case says what the rule says
    error, problems, after = _merge_and_check(spark, commits, "id BIGINT, v DOUBLE, seq BIGINT",
                                              ["id", "v", "seq"], "seq", list(INITIAL.values()))
    assert bool(problems) == refused, problems
    assert (error is not None and GUARD in error) == refused, error
    expected = INITIAL if refused else model.state
    assert sorted(tuple(r) for r in after) == sorted(expected.values())


def test_a_problem_in_an_earlier_commit_is_caught_though_a_later_commit_wins_the_key(spark):
    """Key 1 is ambiguous in the first commit (no sequence-by, two different upserts) and upserted
    cleanly in the second: only the second's row survives the dedup, the refusal must still reach it."""
    commits = [[(1, 1.0, 1, "+I"), (1, 2.0, 1, "+I")], [(1, 3.0, 2, "+U")]]
    error, problems, after = _merge_and_check(spark, commits, "id BIGINT, v DOUBLE, seq BIGINT",
                                              ["id", "v", "seq"], None, [])
    assert [p["problem"] for p in problems] == ["ambiguous"]
    assert error is not None and GUARD in error
    assert after == []


@pytest.mark.parametrize("second, refused", [({"a": 1}, False), ({"a": 2}, True)])
def test_map_columns_are_compared_by_value(spark, second, refused):
    """Two upserts of one key in one commit without sequence-by conflict only if their rows differ
    (maps compared as JSON: Spark cannot order maps)."""
    commits = [[(1, {"a": 1}, "+I"), (1, second, "+U")]]
    error, problems, after = _merge_and_check(spark, commits, "id BIGINT, m MAP<STRING, INT>", ["id", "m"], None,
                                              [], json_columns=["m"])
    assert bool(problems) == refused
    assert (error is not None and GUARD in error) == refused
    assert [(r["id"], r["m"]) for r in after] == ([] if refused else [(1, {"a": 1})])
