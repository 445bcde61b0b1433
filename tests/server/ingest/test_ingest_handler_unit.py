"""The gateway's INSERT and session-setting routes without a JVM (server/gateway/routing/ingest.py)."""

from __future__ import annotations

from tierlake.server.gateway.auth import planauth
from tierlake.server.gateway.routing.ingest import IngestHandler, SessionSettings
from tierlake.server.gateway.routing.router import Router
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo, Statement
from tierlake.server.ingest.request_ids import RequestKeys


class Inner:
    """A route after the ingest one (the CALL route): takes statements starting with CALL."""

    name, role, what = "call", None, "CALL"

    def __init__(self):
        self.executed = []

    def claim(self, statement):
        return statement.text.startswith("CALL")

    def execute(self, statement):
        self.executed.append(statement.text)
        return LocalResult(columns=[("x", "int")], rows=[(1,)])

    def session_closed(self, guid):
        pass


class Sessions:
    def session(self, guid, secret):
        return f"jsession-{guid.hex()}"


class StagedWrite(tuple):
    """What the fake writer stages: compares as a tuple, names its table like ingest.writer.Staged."""

    table = "spark_catalog.db.stream"
    request_id = request_key = None


class Writer:
    def __init__(self):
        self.staged, self.written = [], []

    def stage(self, jsession, statement, parsed=None):
        self.staged.append((jsession, statement, parsed))
        if "stream" in statement:
            return StagedWrite(("staged", statement))
        if "broken" in statement:
            raise RuntimeError("AnalysisException: no such column")
        return None

    def write(self, staged):
        self.written.append(staged)


def session(n=1):
    return SessionInfo(user="u", session_guid=bytes([n]) * 16, protocol_version=9, client_address="x:1",
                       secret=b"s" * 16)


class Gateway:
    """The routes as the gateway asks them: one Statement per statement, routed, then executed."""

    def __init__(self):
        self.inner, self.writer = Inner(), Writer()
        self.settings = SessionSettings(RequestKeys(b"k" * 32))
        self.router = Router([self.settings, IngestHandler(lambda: Sessions(), self.writer), self.inner],
                             settings=self.settings)

    def route(self, statement):
        return self.router.route(statement)

    def run(self, statement):
        assert self.router.route(statement), statement
        return self.router.execute(statement)

    def request_id(self, guid):
        return self.router.request_id(guid)


def plan_of(root: str, java="parsed", strings=()):
    package = "execution.command" if root in ("SetCommand", "ResetCommand") else "catalyst.plans.logical"
    node = planauth.Node(0, -1, "P", f"org.apache.spark.sql.{package}.{root}", strings=list(strings))
    return planauth.Plan(nodes={0: node}, java=java)


def stmt(text, s, root="InsertIntoStatement", java="parsed"):
    """The statement as the authoriser leaves it: Spark's parse (a plan rooted at ``root``) on it."""
    statement = Statement(text, s)
    statement.authorised(plan_of(root, java))
    return statement


def test_an_insert_into_a_stream_table_is_written_here():
    g = Gateway()
    s = session()
    statement = stmt("INSERT INTO db.stream VALUES (1)", s)
    assert g.route(statement) is True and statement.route == "ingest"
    result = g.router.execute(statement)
    assert g.writer.written == [("staged", "INSERT INTO db.stream VALUES (1)")]
    assert result.columns == [("Result", "string")] and result.rows == []
    assert g.inner.executed == []
    assert g.writer.staged[0][0] == "jsession-" + (b"\x01" * 16).hex()  # the client's own Spark session


def test_everything_else_goes_to_the_next_route_or_spark():
    g = Gateway()
    s = session()
    assert g.route(stmt("SELECT 1", s, "Project")) is False
    assert g.writer.staged == []  # not an INSERT on Spark's parse: not even analysed
    assert g.route(stmt("INSERT INTO db.plain VALUES (1)", s)) is False
    # Spark's analysis error: relayed, so Spark answers with its own text.
    assert g.route(stmt("INSERT INTO db.broken VALUES (1)", s)) is False
    call = stmt("CALL sys.version()", s, "Project")
    assert g.route(call) is True and call.route == "call"
    assert g.router.execute(call).rows == [(1,)] and g.inner.executed == ["CALL sys.version()"]


def test_without_the_authorisers_parse_the_statement_is_parsed_once_in_its_session():
    g = Gateway()
    s = session()
    parses = []

    def parse(text):
        parses.append(text)
        return plan_of("InsertIntoStatement", java="dev-parse")

    statement = Statement("INSERT INTO db.stream VALUES (1)", s, parse=parse)
    g.run(statement)
    assert parses == ["INSERT INTO db.stream VALUES (1)"]
    assert g.writer.staged[-1][2] == "dev-parse" and len(g.writer.written) == 1
    plain = Statement("SELECT 1", s, parse=parse)
    assert g.route(plain) is False and len(parses) == 1  # no INSERT or SET in it: not parsed


def test_the_authorisers_parse_is_analysed_not_the_text_again():
    g = Gateway()
    s = session()
    assert g.route(stmt("INSERT INTO db.stream VALUES (1)", s, java="parsed-plan"))
    assert g.writer.staged[-1][2] == "parsed-plan"
    # Spark's parse says: not an INSERT.
    assert g.route(stmt("INSERT INTO db.stream SELECT 1", s, "Project")) is False


def test_two_identical_statements_of_one_session_both_go_to_the_committer():
    """The suspicion of issue 50: an asynchronous client sends the same INSERT twice in one session,
    the second analysed before the first one ran. Each carries its own analysis; neither is handed to
    another route (which would run it outside the committer)."""
    g = Gateway()
    s = session()
    text = "INSERT INTO db.stream VALUES (1)"
    first, second = stmt(text, s), stmt(text, s)
    assert g.route(first) and g.route(second)
    assert first.prepared is not second.prepared
    g.router.execute(second)
    g.router.execute(first)
    assert g.inner.executed == [] and len(g.writer.written) == 2


def set_stmt(s, text, key, value=None, node="SetCommand"):
    strings = [key] if value is None else [key, value]
    statement = Statement(text, s)
    statement.authorised(plan_of(node, strings=strings))
    return statement


def test_the_request_id_is_kept_by_the_gateway_and_tags_the_next_statement_only():
    g = Gateway()
    s = session()
    key = "tierlake.write.request-id"
    result = g.run(set_stmt(s, "SET `tierlake.write.request-id`=abc", key, "abc"))
    assert result.rows == [(key, "abc")]
    assert g.request_id(s.session_guid) == "abc"
    # Another SET does not take it; the next statement does, whatever it is.
    assert g.route(set_stmt(s, "SET spark.sql.ansi.enabled=true", "spark.sql.ansi.enabled", "true")) is False
    assert g.request_id(s.session_guid) == "abc"
    assert g.route(stmt("INSERT INTO db.plain VALUES (1)", s)) is False
    assert g.request_id(s.session_guid) is None
    g.run(stmt("INSERT INTO db.stream VALUES (2)", s))
    assert g.writer.written[-1].request_key is None  # the plain table's INSERT took the id
    g.run(set_stmt(s, "SET `tierlake.write.request-id`=abc", key, "abc"))
    g.run(stmt("INSERT INTO db.stream VALUES (3)", s))
    tagged = g.writer.written[-1]
    assert tagged.request_id == "abc" and tagged.request_key.startswith("k1:") and "abc" not in tagged.request_key
    # Scoped by user: another user's key for the same id differs.
    other = SessionInfo(user="v", session_guid=b"\x09" * 16, protocol_version=9, client_address="x:1",
                        secret=b"s" * 16)
    g.run(set_stmt(other, "SET `tierlake.write.request-id`=abc", key, "abc"))
    g.run(stmt("INSERT INTO db.stream VALUES (3)", other))
    assert g.writer.written[-1].request_key != tagged.request_key
    # A CALL (another local route) runs with the key current: a CTAS's commits record it.
    from tierlake.server.ingest import request_ids

    seen = []
    g.inner.execute = lambda statement: seen.append(request_ids.current_key()) or LocalResult([("x", "int")], [])
    g.run(set_stmt(s, "SET `tierlake.write.request-id`=c", key, "c"))
    g.run(stmt("CALL sys.create_table_as('d.t', 'SELECT 1')", s, "Project"))
    assert seen == [g.settings._key(s, "c")] and request_ids.current_key() is None
    # RESET forgets it; SET key shows it.
    g.run(set_stmt(s, "SET `tierlake.write.request-id`=x", key, "x"))
    assert g.run(set_stmt(s, "SET `tierlake.write.request-id`", key)).rows == [(key, "x")]
    g.run(set_stmt(s, "RESET `tierlake.write.request-id`", key, node="ResetCommand"))
    assert g.request_id(s.session_guid) is None
    # A statement the gateway refused before routing it (its role, Spark's parse) uses it up too.
    g.run(set_stmt(s, "SET `tierlake.write.request-id`=y", key, "y"))
    g.router.refused(Statement("SELECT secret", s))
    assert g.request_id(s.session_guid) is None


def test_bad_request_ids_and_unknown_tierlake_settings_are_refused_at_set():
    import pytest

    from tierlake.server.exceptions import InvalidRequestIdError, UnknownSettingError

    g = Gateway()
    s = session()
    key = "tierlake.write.request-id"
    for bad in ["x" * 257, "a\u2028b", "a\u0085b", "a\u007fb", "a\u202eb", "a\tb", "a\u200bb"]:
        with pytest.raises(InvalidRequestIdError):
            g.run(set_stmt(s, f"SET `tierlake.write.request-id`={bad}", key, bad))
        assert g.request_id(s.session_guid) is None
    g.run(set_stmt(s, "SET `tierlake.write.request-id`=" + "é" * 256, key, "é" * 256))
    assert g.request_id(s.session_guid) == "é" * 256
    with pytest.raises(UnknownSettingError, match="did you mean tierlake.write.request-id"):
        g.run(set_stmt(s, "SET `tierlake.write.requestid`=abc", "tierlake.write.requestid", "abc"))
    with pytest.raises(UnknownSettingError, match="server setting"):
        g.run(set_stmt(s, "SET tierlake.master=local", "tierlake.master", "local"))
    assert g.inner.executed == []
