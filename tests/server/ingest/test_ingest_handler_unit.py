"""The gateway's INSERT handler without a JVM (server/gateway/routing/ingest.py)."""

from __future__ import annotations

from tierlake.server.gateway.routing import ingest as gateway_ingest
from tierlake.server.gateway.routing.ingest import IngestHandler
from tierlake.server.gateway.transport.protocol import LocalResult, SessionInfo


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
    return IngestHandler(inner, lambda: Sessions(), writer), inner, writer


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
    # The same text in another session is not the first session's write.
    h.execute("INSERT INTO db.stream VALUES (1)", b)
    assert inner.executed == ["INSERT INTO db.stream VALUES (1)"] and writer.written == []
    h.session_closed(a.session_guid)
    h.execute("INSERT INTO db.stream VALUES (1)", a)
    assert writer.written == []
    monkeypatch.setattr(gateway_ingest, "MAX_STAGED", 3)
    for n in range(10):
        h.wants_for(f"INSERT INTO db.stream VALUES ({n})", a)
    assert len(h._staged) == 3


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
