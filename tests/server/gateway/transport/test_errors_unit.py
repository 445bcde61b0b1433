"""Spark's error texts as the gateway rewords them (server/gateway/transport/errors.py), without a JVM."""

from __future__ import annotations

from tierlake.server.gateway.transport.errors import readable, readable_call_error

NOT_FOUND = (
    "org.apache.hive.service.cli.HiveSQLException: Error running query: [TABLE_OR_VIEW_NOT_FOUND] "
    "org.apache.spark.sql.AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] The table or view `nowhere`.`nothing` "
    "cannot be found. Verify the spelling and correctness of the schema and catalog.\nIf you did not qualify the "
    "name with a schema, verify the current_schema() output, or qualify the name with the correct schema and "
    "catalog.\nTo tolerate the error on drop use DROP VIEW IF EXISTS or DROP TABLE IF EXISTS.; line 1 pos 14;\n"
    "'Project [*]\n+- 'UnresolvedRelation [nowhere, nothing], [], false\n\n\tat org.apache.spark.sql.hive."
    "thriftserver.HiveThriftServerErrors$.runningQueryError(HiveThriftServerErrors.scala:43)\n\tat org")
PARSE = ("Error running query: [PARSE_SYNTAX_ERROR] org.apache.spark.sql.catalyst.parser.ParseException: \n"
         "[PARSE_SYNTAX_ERROR] Syntax error at or near 'CALL'.(line 1, pos 0)\n\n== SQL ==\nCALL validate('db.t')\n"
         "^^^\n")


def test_table_not_found_is_one_line_with_its_position():
    assert readable(NOT_FOUND, "42P01", 0) == (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nowhere`.`nothing` cannot be found (line 1, pos 14)",
        "42P01", 2004)


def test_a_call_without_its_namespace_gets_a_hint():
    message, state, code = readable(PARSE, "42601", 0)
    assert message == ("[PARSE_SYNTAX_ERROR] Syntax error at or near 'CALL' (line 1, pos 0); tierlake's procedures "
                       "are called with their namespace: CALL sys.validate(…) (sys.procedures lists them)")
    assert (state, code) == ("42601", 2001)


def test_other_error_classes_keep_their_sqlstate_and_errors_without_a_class_are_left_alone():
    message, state, code = readable(
        "Error running query: [DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE] org.apache.spark.sql.AnalysisException: "
        "[DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE] Cannot resolve \"array_contains(1, 2)\" due to data type "
        "mismatch.; line 1 pos 7;\n'Project [unresolvedalias(array_contains(1, 2), None)]\n", "42K09", 0)
    assert message == ("[DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE] Cannot resolve \"array_contains(1, 2)\" due to "
                       "data type mismatch (line 1, pos 7)")
    assert (state, code) == ("42K09", 0)
    assert readable("Error running query: org.apache.spark.SparkException: Job aborted: java.lang.RuntimeException: "
                    "boom", None, 0) is None
    assert readable("", None, 0) is None


def test_a_call_that_does_not_tokenize_is_shown_whole():
    statement = "CALL sys.create_table_as('job.x', 'SELECT 'x' AS a')"
    text = readable_call_error(statement, "cannot parse CALL: Error tokenizing 'ALL sys.create_table_as('")
    assert text.startswith(f"cannot parse CALL: {statement} is not valid SQL")
    assert "write \\' for a quote inside a literal" in text
    assert readable_call_error(statement, "cannot parse CALL: missing '('") == "cannot parse CALL: missing '('"


def test_a_refusal_on_the_resolved_plan_is_a_permission_error():
    relayed = ("org.apache.hive.service.cli.HiveSQLException: Error running query: java.lang.SecurityException: "
               "permission denied: a write into the lake table spark_catalog.db_lake.t (lake tables are written by "
               "tiering only) needs the admin role (decided on Spark's resolved plan)\n\tat io.tierlake.internal.X")
    assert readable(relayed, None, 0) == (
        "permission denied: a write into the lake table spark_catalog.db_lake.t (lake tables are written by "
        "tiering only) needs the admin role (decided on Spark's resolved plan)", "42501", 2008)


def test_a_statement_its_deadline_stopped_says_so():
    # StatementDeadline.java stops a statement that plans past its deadline (Thread.stop): Spark's words.
    relayed = ("org.apache.hive.service.cli.HiveSQLException: Error running query: java.lang.ThreadDeath\n"
               "\tat org.apache.spark.sql.hive.thriftserver.HiveThriftServerErrors$.runningQueryError(x)")
    message, state, code = readable(relayed, None, 0)
    assert message.startswith("statement stopped: it ran longer than its time limit")
    assert "tierlake.query.reader-timeout" in message and (state, code) == ("57014", 0)
    assert readable("Error running query: java.lang.ThreadDeath", None, 0)[1] == "57014"
    assert readable("Error running query: java.lang.RuntimeException: java.lang.ThreadDeath", None, 0) is None
