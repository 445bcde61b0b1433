"""The gateway's INSERT handler without a JVM (server/gateway/routing/ingest.py)."""

from __future__ import annotations

from tierlake.server.gateway.routing import ingest as gateway_ingest
from tierlake.server.gateway.routing.ingest import IngestHandler
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo
from tierlake.server.ingest.request_ids import RequestKeys


class Inner:
    def __init__(self):
        self.executed = []

    def wants(self, statement):
        return statement.startswith("CALL")

    def wants_for(self, statement, session):
        return self.wants(statement)

    def runs_ddl(self, statement):
        return False

    def execute(self, statement, session):
        self.executed.append(statement)
        return LocalResult(columns=[("x", "int")], rows=[(1,)])


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


def handler():
    inner, writer = Inner(), Writer()
    return IngestHandler(inner, lambda: Sessions(), writer, RequestKeys(b"k" * 32)), inner, writer


def test_an_insert_into_a_stream_table_is_written_here():
    h, inner, writer = handler()
    s = session()
    assert h.wants_for("INSERT INTO db.stream VALUES (1)", s) is True
    result = h.execute("INSERT INTO db.stream VALUES (1)", s)
    assert writer.written == [("staged", "INSERT INTO db.stream VALUES (1)")]
    assert result.columns == [("Result", "string")] and result.rows == []
    assert inner.executed == []
    assert writer.staged[0][0] == "jsession-" + (b"\x01" * 16).hex()  # the client's own Spark session


def test_everything_else_goes_to_the_next_handler_or_spark():
    h, inner, writer = handler()
    s = session()
    assert h.wants_for("SELECT 1", s) is False
    assert writer.staged == []  # no INSERT in the text: not even analysed
    assert h.wants_for("INSERT INTO db.plain VALUES (1)", s) is False
    # Spark's analysis error: relayed, so Spark answers with its own text.
    assert h.wants_for("INSERT INTO db.broken VALUES (1)", s) is False
    assert h.wants_for("CALL sys.version()", s) is True
    assert h.execute("CALL sys.version()", s).rows == [(1,)] and inner.executed == ["CALL sys.version()"]


def test_a_staged_statement_belongs_to_its_session_and_the_memory_is_bounded(monkeypatch):
    h, inner, writer = handler()
    a, b = session(1), session(2)
    assert h.wants_for("INSERT INTO db.stream VALUES (1)", a)
    # The same text in another session is not the first session's write: analysed again in its own session.
    h.execute("INSERT INTO db.stream VALUES (1)", b)
    assert writer.staged[-1][0] == "jsession-" + b.session_guid.hex()
    assert inner.executed == [] and len(writer.written) == 1
    h.session_closed(a.session_guid)
    assert h._staged == {}
    monkeypatch.setattr(gateway_ingest, "MAX_STAGED", 3)
    for n in range(10):
        h.wants_for(f"INSERT INTO db.stream VALUES ({n})", a)
    assert len(h._staged) == 3
    # One forgotten at the bound is analysed again when it runs: never relayed around the committer.
    h.execute("INSERT INTO db.stream VALUES (0)", a)
    assert inner.executed == [] and writer.written[-1] == ("staged", "INSERT INTO db.stream VALUES (0)")


def test_the_authorisers_parse_is_analysed_not_the_text_again():
    from tierlake.server.gateway.auth import planauth

    h, inner, writer = handler()
    s = session()
    text = "INSERT INTO db.stream VALUES (1)"
    insert = planauth.Node(0, -1, "P", "org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement")
    plan = planauth.Plan(nodes={0: insert}, java="parsed-plan")
    planauth.remember(text, plan)
    assert h.wants_for(text, s)
    assert writer.staged[-1][2] == "parsed-plan"
    other = planauth.Plan(nodes={0: planauth.Node(0, -1, "P", "org.apache.spark.sql.catalyst.plans.logical.Project")})
    planauth.remember("INSERT INTO db.stream SELECT 1", other)  # Spark's parse says: not an INSERT
    assert h.wants_for("INSERT INTO db.stream SELECT 1", s) is False


def test_two_identical_statements_of_one_session_both_go_to_the_committer():
    """The suspicion of issue 50: an asynchronous client sends the same INSERT twice in one session,
    the second analysed before the first one's thread picked its analysis up. Each run takes one
    analysis; neither is handed to the next handler (which would run it outside the committer)."""
    h, inner, writer = handler()
    s = session()
    text = "INSERT INTO db.stream VALUES (1)"
    assert h.wants_for(text, s) and h.wants_for(text, s)
    h.execute(text, s)
    h.execute(text, s)
    assert inner.executed == [] and len(writer.written) == 2
    assert h._staged == {}


def set_plan(text, key, value=None, node="SetCommand"):
    from tierlake.server.gateway.auth import planauth

    strings = [key] if value is None else [key, value]
    root = planauth.Node(0, -1, "P", f"org.apache.spark.sql.execution.command.{node}", strings=strings)
    planauth.remember(text, planauth.Plan(nodes={0: root}))
    return text


def insert_plan(text):
    from tierlake.server.gateway.auth import planauth

    insert = planauth.Node(0, -1, "P", "org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement")
    planauth.remember(text, planauth.Plan(nodes={0: insert}, java="parsed"))
    return text


def run(h, text, s):
    assert h.wants_for(text, s)
    return h.execute(text, s)


def test_the_request_id_is_kept_by_the_gateway_and_tags_the_next_statement_only():
    h, inner, writer = handler()
    s = session()
    result = run(h, set_plan("SET `tierlake.write.request-id`=abc", "tierlake.write.request-id", "abc"), s)
    assert result.rows == [("tierlake.write.request-id", "abc")]
    assert h.request_id(s.session_guid) == "abc"
    # Another SET does not take it; the next statement does, whatever it is.
    set_plan("SET spark.sql.ansi.enabled=true", "spark.sql.ansi.enabled", "true")
    assert h.wants_for("SET spark.sql.ansi.enabled=true", s) is False
    assert h.request_id(s.session_guid) == "abc"
    assert h.wants_for(insert_plan("INSERT INTO db.plain VALUES (1)"), s) is False
    assert h.request_id(s.session_guid) is None
    run(h, insert_plan("INSERT INTO db.stream VALUES (2)"), s)
    assert writer.written[-1].request_key is None  # the plain table's INSERT took the id
    run(h, set_plan("SET `tierlake.write.request-id`=abc", "tierlake.write.request-id", "abc"), s)
    run(h, insert_plan("INSERT INTO db.stream VALUES (3)"), s)
    tagged = writer.written[-1]
    assert tagged.request_id == "abc" and tagged.request_key.startswith("k1:") and "abc" not in tagged.request_key
    # Scoped by user: another user's key for the same id differs.
    other = SessionInfo(user="v", session_guid=b"\x09" * 16, protocol_version=9, client_address="x:1",
                        secret=b"s" * 16)
    run(h, set_plan("SET `tierlake.write.request-id`=abc", "tierlake.write.request-id", "abc"), other)
    run(h, insert_plan("INSERT INTO db.stream VALUES (3)"), other)
    assert writer.written[-1].request_key != tagged.request_key
    # RESET forgets it; SET key shows it.
    run(h, set_plan("SET `tierlake.write.request-id`=x", "tierlake.write.request-id", "x"), s)
    assert run(h, set_plan("SET `tierlake.write.request-id`", "tierlake.write.request-id"), s).rows == [
        ("tierlake.write.request-id", "x")]
    run(h, set_plan("RESET `tierlake.write.request-id`", "tierlake.write.request-id", node="ResetCommand"), s)
    assert h.request_id(s.session_guid) is None
    # A statement the gateway refused before asking the handlers (its role, Spark's parse) uses it up too.
    run(h, set_plan("SET `tierlake.write.request-id`=y", "tierlake.write.request-id", "y"), s)
    h.statement_refused(s)
    assert h.request_id(s.session_guid) is None


def test_bad_request_ids_and_unknown_tierlake_settings_are_refused_at_set():
    import pytest

    from tierlake.server.exceptions import InvalidRequestIdError, UnknownSettingError

    h, inner, writer = handler()
    s = session()
    for bad in ["x" * 257, "a\u2028b", "a\u0085b", "a\u007fb", "a\u202eb", "a\tb", "a\u200bb"]:
        text = set_plan(f"SET `tierlake.write.request-id`={bad}", "tierlake.write.request-id", bad)
        with pytest.raises(InvalidRequestIdError):
            run(h, text, s)
        assert h.request_id(s.session_guid) is None
    run(h, set_plan("SET `tierlake.write.request-id`=" + "é" * 256, "tierlake.write.request-id", "é" * 256), s)
    assert h.request_id(s.session_guid) == "é" * 256
    with pytest.raises(UnknownSettingError, match="did you mean tierlake.write.request-id"):
        run(h, set_plan("SET `tierlake.write.requestid`=abc", "tierlake.write.requestid", "abc"), s)
    with pytest.raises(UnknownSettingError, match="server setting"):
        run(h, set_plan("SET tierlake.master=local", "tierlake.master", "local"), s)
    assert inner.executed == []
