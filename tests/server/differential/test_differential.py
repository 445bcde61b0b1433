"""The differential harness in the default suite (issue 50 item 5; docs/design.md §17 "Spark is the
reference"): generated tiered tables — every Spark primitive type as key and value, ARRAY/MAP/STRUCT
values, composite keys, hostile table, column and struct-field names — and generated change streams
written by every statement form and request-id retry, each compared step by step with plain Spark SQL
on plain Iceberg tables (harness.py says what is compared and how).

Seeded (``derandomize``) and bounded: ``TIERLAKE_DIFFERENTIAL_EXAMPLES`` generated cases (default
25), and issue 50's reproductions as explicit cases (strategies.EXPLICIT_CASES), one database per
example on the session's server. A failure shrinks to a minimal case; the note printed with it is
the case as DDL and rows, and the error's class names the stage that diverged. The long
mode is ``bench/differential.py``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings

from tests.server.differential.harness import Batcher, Harness, short_retention
from tests.server.differential.strategies import EXPLICIT_CASES, cases

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("TIERLAKE_DIFFERENTIAL_EXAMPLES", "25"))


@pytest.fixture(scope="module", autouse=True)
def _short_retention(server):
    """The ``retention`` retries wait past a request-id retention of a second (harness.short_retention)."""
    with short_retention(server.spark, server):
        yield


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=True,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(case=cases())
def test_tierlake_gives_what_plain_spark_gives(server, case):
    note(case.describe())
    Harness(server).run(case)
    for line in case.notes:
        note(line)


@pytest.mark.parametrize("case", EXPLICIT_CASES, ids=[c.name for c in EXPLICIT_CASES])
def test_issue_50_reproductions_give_what_plain_spark_gives(server, case):
    """Each of issue 50's reproductions as a case of the harness (its own test, so that one failing
    does not stop the generated cases above)."""
    Harness(server).run(case)


def test_batched_reads_answer_as_each_read_alone(server):
    """The long mode's batcher (harness.Batcher): reads sent as one ``UNION ALL`` get the rows each
    read alone gets (NaN, -0.0, BINARY and an empty answer among them); a read that fails fails alone,
    and the others of its batch still get their rows."""
    spark = server.spark
    spark.sql("CREATE DATABASE IF NOT EXISTS dfx_batcher")
    spark.sql("CREATE TABLE IF NOT EXISTS dfx_batcher.t (k INT, d DOUBLE, b BINARY) USING iceberg")
    spark.sql("INSERT INTO dfx_batcher.t VALUES (1, CAST('NaN' AS DOUBLE), X'AA'), (2, CAST('-0.0' AS DOUBLE), X''), "
              "(3, 0.0, NULL)")
    texts = [f"SELECT count(*) AS n, sum(k) AS s FROM dfx_batcher.t WHERE k >= {k}" for k in (1, 2, 4)]
    texts.append("SELECT count(*) AS n, count(DISTINCT d) AS s FROM dfx_batcher.t")
    texts.append("SELECT count(*) AS n, sum(k) AS s FROM dfx_batcher.missing_table")
    batcher = Batcher(spark, max_wait=30)
    try:
        with batcher.case():
            requests = [batcher.submit("pairs", False, text) for text in texts]
            answers = []
            for request in requests:
                try:
                    answers.append(batcher.wait(request))
                except Exception as e:  # noqa: BLE001 - the failing read
                    answers.append(e)
    finally:
        batcher.stop()
    alone = [spark.sql(text).collect() for text in texts[:-1]]
    assert [[tuple(r) for r in rows] for rows in answers[:-1]] == [[tuple(r) for r in rows] for rows in alone]
    assert [tuple(r) for r in answers[3]] == [(3, 2)]  # NaN one value, -0.0 = 0.0
    assert isinstance(answers[-1], Exception) and "missing_table" in str(answers[-1])
    assert batcher.batches == 0 and batcher.alone == len(texts)  # the failing batch sent again, one by one
    # Without the failing read: one batch.
    batcher = Batcher(spark, max_wait=30)
    try:
        with batcher.case():
            requests = [batcher.submit("pairs", False, text) for text in texts[:-1]]
            again = [batcher.wait(request) for request in requests]
    finally:
        batcher.stop()
    assert [[tuple(r) for r in rows] for rows in again] == [[tuple(r) for r in rows] for rows in alone]
    assert batcher.batches == 1 and all(r.batched for r in requests)
    spark.sql("DROP DATABASE dfx_batcher CASCADE")
