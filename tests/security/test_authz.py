"""Authorisation rules without a JVM: CALL roles, the rules applied to
flattened plans (as PlanWalker.java writes them), the request allow-lists.
Spark's own parse of real statements: test_planauth_spark.py."""

import pytest

from tierlake.procedures import load_builtins
from tierlake.server.exceptions import PermissionDeniedError, StatementTooLargeError
from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.auth.authz import Authorizer, call_requirement
from tierlake.server.gateway.auth.passwords import PasswordFile, set_user
from tierlake.server.gateway.auth.requestcheck import check_configuration, check_overlay
from tierlake.server.sqlapi import roles as R

CAT = "org.apache.spark.sql.catalyst"


@pytest.mark.parametrize("statement, role", [
    ("CALL sys.version()", R.READER),
    ("call SYS.list_tiering_statuses('a.b')", R.READER),
    ("CALL sys.heartbeat('job')", R.TIERING),
    ("CALL sys.enable_tiering('a.b')", R.ADMIN),
    ("CALL sys.retry_tiering(table => 'a.b')", R.ADMIN),
    ("CALL sys.nosuch()", R.READER),  # the handler says "unknown procedure"
    ("CALL sys.version(", R.READER),  # the handler says "syntax error"
])
def test_call_roles(statement, role):
    assert call_requirement(statement, load_builtins()).role == role


def test_without_a_registry_the_default_registry_gives_the_role():
    load_builtins()
    assert call_requirement("CALL sys.acquire_lease('job', 'a.b')").role == R.TIERING
    assert call_requirement("CALL sys.some_extension()").role == R.ADMIN


def plan(*lines: str) -> planauth.Plan:
    return planauth.decode("\n".join(lines) + "\n")


def insert_into(*parts: str) -> planauth.Plan:
    return plan(f"N\t0\t-1\tP\t{CAT}.plans.logical.InsertIntoStatement",
                f"N\t1\t0\tP\t{CAT}.analysis.UnresolvedRelation", "Q\t1\t" + "\t".join(parts),
                f"N\t2\t0\tP\t{CAT}.plans.logical.OneRowRelation")


def test_unqualified_writes_follow_the_current_database():
    assert planauth.requirement(insert_into("tiering_tables"), "sys").role == R.ADMIN
    assert planauth.requirement(insert_into("tiering_tables"), "SYS").role == R.ADMIN
    assert planauth.requirement(insert_into("tiering_tables"), "shop").role == R.WRITER
    assert planauth.requirement(insert_into("spark_catalog", "sys", "t"), "shop").role == R.ADMIN
    assert planauth.requirement(insert_into("csv", "/tmp/x"), "shop").role == R.ADMIN


def test_unknown_nodes_need_admin_and_escapes_decode():
    p = plan(f"N\t0\t-1\tP\t{CAT}.plans.logical.SomethingNew", "S\t0\ta\\tb\\\\c\\nd")
    assert p.root.strings == ["a\tb\\c\nd"]
    assert planauth.requirement(p, None).role == R.ADMIN
    other = plan("N\t0\t-1\tE\tcom.example.EvilExpression")
    assert planauth.requirement(other, None).role == R.ADMIN


@pytest.mark.parametrize("key, value, role", [
    (None, None, R.READER), ("-v", None, R.ADMIN), ("spark.sql.catalog.x", None, R.READER),
    ("spark.sql.session.timezone", "UTC", R.READER), ("spark.sql.catalog.evil", "x", R.ADMIN),
    ("spark.sql.variable.substitute", "true", planauth.NOBODY),
])
def test_settings(key, value, role):
    assert planauth.setting_requirement(key, value).role == role


def test_session_configuration_allow_list():
    check_configuration({"use:database": "shop", "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size":
                         "1000", "set:hiveconf:spark.sql.session.timeZone": "UTC"})
    check_configuration({"use:database": "`sys`"})
    for bad in ({"set:hiveconf:spark.sql.catalog.x": "com.example.X"}, {"set:system:user.home": "/"},
                {"set:hivevar:x": "1"}, {"use:database": "sys; DROP TABLE x"}, {"use:database": "`sys"},
                {"set:hiveconf:spark.sql.variable.substitute": "true"}, {"anything": "x"}):
        with pytest.raises(PermissionDeniedError):
            check_configuration(bad)
    check_overlay({"spark.sql.ansi.enabled": "true"})
    with pytest.raises(PermissionDeniedError):
        check_overlay({"spark.sql.extensions": "x"})


@pytest.fixture
def authorizer(tmp_path):
    path = tmp_path / "users"
    for user, role in [("ann", "admin"), ("rita", "reader"), ("will", "writer"), ("ts", "tiering-service")]:
        set_user(path, user, "pw", frozenset({role}))
    return Authorizer(PasswordFile(path), load_builtins(), max_statement_size=100)


def test_denials_name_the_statement_the_role_needed_and_the_user(authorizer):
    with pytest.raises(PermissionDeniedError) as info:
        authorizer.check("rita", "CALL sys.heartbeat('j')")
    assert info.value.sqlstate == "42501"
    assert info.value.message == ("permission denied: CALL sys.heartbeat needs the tiering-service role; "
                                  "user 'rita' has reader")
    with pytest.raises(PermissionDeniedError, match="needs the tiering-service role; user 'ann' has admin"):
        authorizer.check("ann", "CALL sys.heartbeat('j')")
    with pytest.raises(PermissionDeniedError, match="has no role"):
        authorizer.check("stranger", "CALL sys.enable_tiering('a.b')")


def test_grants(authorizer):
    authorizer.check("ts", "CALL sys.heartbeat('j')")
    authorizer.check("ts", "CALL sys.server_info()")
    authorizer.check("rita", "CALL sys.version()")
    with pytest.raises(PermissionDeniedError):
        authorizer.check("will", "CALL sys.enable_tiering('shop.t')")


def test_nothing_but_calls_passes_before_spark_is_attached(authorizer):
    with pytest.raises(PermissionDeniedError, match="not allowed"):
        authorizer.check("ann", "SELECT 1")


def test_statement_size_limit(authorizer):
    with pytest.raises(StatementTooLargeError) as info:
        authorizer.check("ann", "SELECT '" + "x" * 200 + "'")
    assert info.value.sqlstate == "54000"
    assert "statement too large: 209 bytes; tierlake.gateway.max-statement-size is 100 bytes" in info.value.message
    with pytest.raises(StatementTooLargeError):  # development mode too
        Authorizer(None, max_statement_size=10).check(None, "SELECT 1234567890")


def test_development_mode_allows_everything():
    dev = Authorizer(None)
    assert not dev.enabled and dev.authenticate("anyone", "") and dev.roles("x") == set(R.ROLES)
    dev.check("anyone", "CALL sys.heartbeat('j')")
    dev.check(None, "DROP TABLE x")


def select_from(*parts: str) -> planauth.Plan:
    return plan(f"N\t0\t-1\tP\t{CAT}.plans.logical.Project",
                f"N\t1\t0\tP\t{CAT}.analysis.UnresolvedRelation", "Q\t1\t" + "\t".join(parts))


@pytest.mark.parametrize("text, folded", [
    ("c\u017fv", "csv"), ("b\u0131naryf\u0131le", "binaryfile"), ("\u0130ceberg", "iceberg"),
    ("\u212aafka", "kafka"), ("JSON", "json"), ("stra\u00dfe", "stra\u00dfe"),
])
def test_names_fold_as_java_compares_them(text, folded):
    assert planauth.java_fold(text) == folded


@pytest.mark.parametrize("parts, role", [
    (("c\u017fv", "/etc/passwd"), R.ADMIN), (("b\u0131naryf\u0131le", "etc"), R.ADMIN),  # look-alike sources
    (("TEXT", "etc"), R.ADMIN), (("org.apache.spark.sql.parquet", "x"), R.ADMIN),
    (("shop", "a.b"), R.READER),  # a dotted table name is a table name
    (("shop", "t", "snapshots"), R.READER), (("shop", "t", "\u017fnapshots"), R.READER),
    (("shop", "t", "branch_audit"), R.READER), (("shop", "t", "tag_v1"), R.READER),
    (("\u017fpark_catalog", "shop", "t"), R.READER), (("tierlake_locking", "shop", "t"), R.ADMIN),
    (("shop", "t", "other"), R.ADMIN), (("shop", "/etc/x"), R.ADMIN),
])
def test_relations_as_spark_resolves_them(parts, role):
    assert planauth.requirement(select_from(*parts), "shop").role == role


def test_a_data_source_is_asked_of_spark_when_it_can_be():
    # The lookup decides (Spark's own: ResolveSQLOnFile calls it), not the known short names.
    assert planauth.requirement(select_from("avro2", "x"), "shop", data_source=lambda n: n == "avro2").role == R.ADMIN
    assert planauth.requirement(select_from("csv", "t"), "shop", data_source=lambda n: False).role == R.READER


def call(name: str) -> planauth.Plan:
    return plan(f"N\t0\t-1\tP\t{CAT}.plans.logical.Project", f"N\t1\t0\tE\t{CAT}.analysis.UnresolvedFunction",
                f"Q\t1\t{name}")


def test_functions():
    builtins = frozenset({"abs", "reflect", "xpath_string"})
    assert planauth.requirement(call("abs"), "shop", builtins).role == R.READER
    assert planauth.requirement(call("REFLECT"), "shop", builtins).role == R.ADMIN
    assert planauth.requirement(call("XPATH_STRING"), "shop", builtins).role is planauth.NOBODY
    assert "XML functions" in planauth.requirement(call("xpath_string"), "shop", builtins).what
    # Not a built-in (a persistent function of the current database): admin.
    need = planauth.requirement(call("refl"), "shop", builtins)
    assert need.role == R.ADMIN and "persistent functions need admin" in need.what


@pytest.mark.parametrize("key, value, role", [
    ("spark.sql.shuffle.partitions", "8", R.READER), ("spark.sql.shuffle.partitions", "1000000", R.ADMIN),
    ("spark.sql.shuffle.partitions", "${env:HOME}", planauth.NOBODY), ("${x}", "1", planauth.NOBODY),
    ("spark.sql.autobroadcastjointhreshold", "10MB", R.READER),
    ("spark.sql.autobroadcastjointhreshold", "-1", R.READER),
    ("spark.sql.autobroadcastjointhreshold", "4g", R.ADMIN), ("spark.sql.ansi.enabled", "yes", R.ADMIN),
    ("spark.sql.session.timezone", "Europe/Paris", R.READER), ("spark.sql.session.timezone", "'+08:00'", R.READER),
    ("spark.sql.legacy.timeparserpolicy", "corrected", R.READER), ("spark.sql.cbo.enabled", "true", R.READER),
    ("spark.sql.\u017fhuffle.partitions", "8", R.ADMIN),  # a look-alike key is not the setting
])
def test_settings_by_key_and_value(key, value, role):
    assert planauth.setting_requirement(key, value).role == role


def test_readers_normal_work_nodes():
    time_travel = plan(f"N\t0\t-1\tP\t{CAT}.plans.logical.Project", f"N\t1\t0\tP\t{CAT}.analysis.RelationTimeTravel",
                       f"N\t2\t1\tP\t{CAT}.analysis.UnresolvedRelation", "Q\t2\tshop\tt")
    assert planauth.requirement(time_travel, "shop").role == R.READER
    cmd = "org.apache.spark.sql.execution.command"
    local = plan(f"N\t0\t-1\tP\t{cmd}.CreateViewCommand", "S\t0\tview-type:LocalTempView",
                 f"N\t1\t0\tP\t{CAT}.plans.logical.OneRowRelation")
    assert planauth.requirement(local, "shop").role == R.READER
    for kind in ("GlobalTempView", "PersistedView"):
        other = plan(f"N\t0\t-1\tP\t{cmd}.CreateViewCommand", f"S\t0\tview-type:{kind}")
        assert planauth.requirement(other, "shop").role == R.ADMIN
    # A temporary view over files: its query is checked like any other.
    over_files = plan(f"N\t0\t-1\tP\t{cmd}.CreateViewCommand", "S\t0\tview-type:LocalTempView",
                      f"N\t1\t0\tP\t{CAT}.analysis.UnresolvedRelation", "Q\t1\tcsv\t/etc")
    assert planauth.requirement(over_files, "shop").role == R.ADMIN
    assert planauth.requirement(plan(f"N\t0\t-1\tP\t{cmd}.ShowCatalogsCommand"), "shop").role == R.READER
    clear = planauth.requirement(plan(f"N\t0\t-1\tP\t{cmd}.ClearCacheCommand$"), "shop")
    assert clear == planauth.Requirement(R.ADMIN, "CLEAR CACHE")


def test_client_values_are_never_expanded():
    for bad in ({"set:hiveconf:spark.sql.session.timeZone": "${env:HOME}"}, {"${system:x}": "1"},
                {"set:hiveconf:spark.sql.shuffle.partitions": "100000"}):
        with pytest.raises(PermissionDeniedError):
            check_configuration(bad)
    with pytest.raises(PermissionDeniedError, match="never expands"):
        check_overlay({"spark.sql.session.timeZone": "${hiveconf:x}"})
    check_overlay({"spark.sql.session.timeZone": "UTC"})
