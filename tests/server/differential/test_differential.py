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

from tests.server.differential.harness import Harness
from tests.server.differential.strategies import EXPLICIT_CASES, cases

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("TIERLAKE_DIFFERENTIAL_EXAMPLES", "25"))


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
