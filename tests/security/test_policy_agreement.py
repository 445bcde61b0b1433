"""Both lines of authorisation agree on every entry of the one policy (server/gateway/auth/policy.json).

For each entry, each of its example statements and each role (reader, writer, admin): the first line's
decision (planauth on Spark's parse, as the gateway makes it) and the second line's (AuthzCheck.refusal
on Spark's analysed plan of the same parse, through py4j) are both the entry's: allowed exactly when the
role may do what the entry declares. Where only one line can decide (``decided_by``: a pattern taken
from data, a table's properties, a setting Spark's rule never sees), that line is checked.
"""

from __future__ import annotations

import re
import uuid

import pytest

from tierlake.procedures import load_builtins
from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.auth.authz import Authorizer, SparkSessions
from tierlake.server.sqlapi import roles as R

pytestmark = pytest.mark.integration

ROLES = (R.READER, R.WRITER, R.ADMIN)
_RANK = {R.READER: 0, R.WRITER: 1, R.ADMIN: 2}


def may(role: str, needs: str) -> bool:
    """Whether ``role`` may do what the policy declares needs ``needs`` (a role, or "nobody")."""
    return needs != "nobody" and _RANK[role] >= _RANK[needs]


@pytest.fixture(scope="module")
def authorizer(spark):
    # SparkSessions hands the policy to Spark's check rule (authz.configure_policy), as the server does.
    return Authorizer(None, load_builtins()).attach(SparkSessions(spark))


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    """What the examples name: a database with an Iceberg table, a table with a stream table's
    property, one with a lake table's, a directory with a CSV file, and another catalog."""
    db = "policy_" + uuid.uuid4().hex[:8]
    files = tmp_path_factory.mktemp("policy")
    (files / "a.csv").write_text("1\n")
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {db}.t (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {db}.t VALUES (1)")
    # The check rule decides on these properties alone (AuthzCheck.tieredWrite): no tiering is set up.
    spark.sql(f"CREATE TABLE {db}.s (id INT) USING iceberg TBLPROPERTIES ('table.datalake.enabled'='true')")
    spark.sql(f"CREATE TABLE {db}.l (id INT) USING iceberg TBLPROPERTIES ('tierlake.stream-table'='{db}.s')")
    snapshot = spark.sql(f"SELECT snapshot_id FROM {db}.t.snapshots").collect()[0][0]
    catalogs = sorted(key.split(".")[3] for key, _ in spark.sparkContext.getConf().getAll()
                      if re.fullmatch(r"spark\.sql\.catalog\.[a-z_]+", key) and not key.endswith(".spark_catalog"))
    yield {"db": db, "table": f"{db}.t", "stream": f"{db}.s", "lake": f"{db}.l", "files": str(files),
           "snapshot": str(snapshot), "catalog": catalogs[0] if catalogs else None}
    spark.sql(f"DROP DATABASE {db} CASCADE")


def fill(template: str, values: dict) -> str:
    def one(found):
        value = values.get(found.group(1))
        if value is None:
            pytest.skip(f"nothing to fill {found.group(0)} with here")
        return value
    return re.sub(r"\{(name|table|db|files|catalog|stream|lake|snapshot)\}", one, template)


def statements(entry: dict, world: dict, key: str = "examples") -> list[str]:
    """The entry's example statements, one per SQL name where an example names one."""
    examples = entry[key]
    if isinstance(examples, dict):
        return [fill(text, {**world, "name": name}) for name, text in examples.items()]
    out = []
    for text in examples:
        names = entry.get("names") if "{name}" in text else [None]
        out += [fill(text, {**world, "name": name}) for name in names]
    return out


def first_line(authorizer, statement: str, role: str) -> tuple[bool, str]:
    """The gateway's decision on Spark's parse in the driver's session (current database: default)."""
    sessions = authorizer.sessions
    jsession = sessions.session(None, None)
    plan = planauth.parse_plan(jsession, statement)
    functions = {n.seqs[0][-1].lower() for n in plan.nodes.values() if n.name == "UnresolvedFunction" and n.seqs}
    decision = planauth.authorise(plan, frozenset({role}), "default", sessions.functions(jsession, functions),
                                  sessions.data_source(jsession))
    return decision.allowed, decision.requirement.what


def second_line(spark, statement: str, role: str) -> tuple[bool | None, str | None]:
    """Spark's check rule on Spark's analysis of the same parse. The analyser alone runs (no check rule,
    nothing executed: a DROP stays a plan), then AuthzCheck.refusal decides for ``role``. (None, why)
    when Spark 3.5 does not know the function (``try_reflect`` is Spark 4's): nothing would run."""
    from pyspark.errors.exceptions.captured import AnalysisException

    jsession = spark._jsparkSession
    parsed = planauth.parse_plan(jsession, statement).java
    try:
        analysed = jsession.sessionState().analyzer().execute(parsed)
    except AnalysisException as error:
        if "UNRESOLVED_ROUTINE" in str(error):
            return None, str(error)[:120]
        raise
    refused = spark.sparkContext._jvm.io.tierlake.internal.AuthzCheck.refusal(analysed, role)
    return refused is None, refused


def cases():
    for entry in planauth.POLICY["entries"]:
        yield pytest.param(entry, "examples", entry["role"], id=entry["id"])
        if entry.get("non_literal_examples"):
            yield pytest.param(entry, "non_literal_examples", entry["non_literal_role"],
                               id=entry["id"] + "-non-literal")


@pytest.fixture(scope="module")
def setup_done(spark, world):
    for entry in planauth.POLICY["entries"]:
        for text in entry.get("setup", []):
            spark.sql(fill(text, world))
    return True


@pytest.mark.parametrize(("entry", "key", "needs"), list(cases()))
def test_both_lines_decide_every_entry_as_the_policy_declares(spark, authorizer, world, setup_done, entry, key, needs):
    assert spark.sparkContext._jvm.io.tierlake.internal.AuthzCheck.configured()
    decided_by = entry["decided_by"]
    wrong, resolved = [], 0
    for statement in statements(entry, world, key):
        for role in ROLES:
            expected = may(role, needs)
            first, what = first_line(authorizer, statement, role)
            second, refused = second_line(spark, statement, role)
            if decided_by in ("both", "parsed") and first != expected:
                wrong.append(f"{role}: first line {'allows' if first else 'refuses (' + what + ')'}: {statement}")
            if second is None:
                continue
            resolved += 1
            if decided_by in ("both", "resolved") and second != expected:
                wrong.append(f"{role}: second line {'allows' if second else 'refuses (' + refused + ')'}: {statement}")
    assert not wrong, f"{entry['id']} (needs {needs}, decided by {decided_by}):\n" + "\n".join(wrong)
    assert resolved, f"{entry['id']}: Spark analysed none of its examples"


def test_a_policy_the_check_rule_cannot_read_is_refused_whole(spark, authorizer):
    """configure() takes a whole policy or nothing: the one before stays."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import IllegalArgumentException

    jvm = spark.sparkContext._jvm
    broken = planauth.policy_text().replace('"id": "writes-into-sys"', '"id": "writes-into-nothing"')
    with pytest.raises((IllegalArgumentException, Py4JJavaError), match="no entry writes-into-sys"):
        jvm.io.tierlake.internal.AuthzCheck.configure(broken)
    allowed, refused = second_line(spark, "SELECT xpath_string('<a>1</a>', 'a')", R.ADMIN)
    assert not allowed and refused == ("permission denied: XPathString (XML functions fetch what a document names) "
                                       "is not allowed (decided on Spark's resolved plan)")


def test_the_check_rule_refuses_every_non_admin_statement_until_it_has_a_policy(spark, authorizer):
    """Deny by default: before authz.configure_policy, the rule knows nothing a reader may do."""
    jvm = spark.sparkContext._jvm
    check = jvm.io.tierlake.internal.AuthzCheck
    field = check._java_lang_class.getDeclaredField("policy")
    field.setAccessible(True)
    field.set(None, None)
    try:
        assert not check.configured()
        for role in (R.READER, R.WRITER):
            allowed, refused = second_line(spark, "SELECT 1", role)
            assert not allowed and "the authorisation policy is not loaded" in refused, refused
        assert second_line(spark, "SELECT 1", R.ADMIN) == (True, None)  # the server's own sessions
    finally:
        SparkSessions(spark)  # configures it again, as the server does
    assert check.configured() and second_line(spark, "SELECT 1", R.READER) == (True, None)
