"""Property: whatever the changes and however commits fall into rounds, the
lake table of a primary-key table equals a model computed independently."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.tiering.conftest import wait_tiered

pytestmark = pytest.mark.integration

_counter = itertools.count()

change = st.tuples(
    st.integers(min_value=0, max_value=5),                    # key
    st.integers(min_value=-1000, max_value=1000),             # value
    st.sampled_from(["+I", "+U", "-U", "-D", None]),          # change type
)
# Within one commit a key appears once: without sequence-by, Spark does not
# order two rows of one multi-task write (documented in docs/tiering.md).
commits = st.lists(st.lists(change, min_size=1, max_size=6, unique_by=lambda c: c[0]), min_size=1, max_size=4)


def model_of(all_commits) -> dict[int, int]:
    state: dict[int, int] = {}
    for commit in all_commits:
        for key, value, kind in commit:
            if kind == "-U":
                continue
            if kind == "-D":
                state.pop(key, None)
            else:
                state[key] = value
    return state


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(commits=commits)
def test_random_change_sequences_match_the_model(server, workers, hive_cursor, spark, commits):
    db = "prop"
    table = f"t{next(_counter)}"
    hive_cursor.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
    hive_cursor.execute(f"CREATE TABLE {db}.{table} (k BIGINT, v BIGINT) TBLPROPERTIES "
                        "('table.datalake.enabled'='true', 'primary-key'='k', 'bucket.num'='2', "
                        "'table.datalake.freshness'='1 s')")
    for commit in commits:
        hive_cursor.execute(
            f"INSERT INTO {db}.{table} (k, v, _change_type) VALUES "
            + ", ".join(f"({k}, {v}, {'NULL' if c is None else repr(c)})" for k, v, c in commit)
        )
    wait_tiered(server, f"{db}.{table}")
    hive_cursor.execute(f"SELECT k, v FROM {db}_lake.{table}")
    assert dict(hive_cursor.fetchall()) == model_of(commits)
    hive_cursor.execute(f"CALL sys.disable_tiering('{db}.{table}')")
    hive_cursor.fetchall()
