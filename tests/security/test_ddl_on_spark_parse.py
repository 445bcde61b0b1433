"""DDL the gateway runs itself (tiered CREATE, tiering ALTER, DROP/RENAME of a
table with a fresh view) is what Spark's parse says the statement is: a text
that a second parser reads as DDL and Spark as a SELECT runs as the SELECT,
with no side effect, for every role (docs/security.md)."""

from __future__ import annotations

import uuid

import pytest

from tests.security.test_auth_integration import login, sql_error

pytestmark = pytest.mark.integration

# Spark closes a /* comment at the first */ (sqlglot nests at /*+), and a
# `-- \` comment goes on past the newline in Spark's lexer only.
SMUGGLED = [
    "/* /*+ */ SELECT 1 AS one -- */ {ddl}",
    "-- \\\n{ddl}\nSELECT 1 AS one",
]


@pytest.fixture(scope="module")
def tiered(auth_gateway):
    db = "sp_" + uuid.uuid4().hex[:8]
    with login(auth_gateway, "ann") as admin:
        cur = admin.cursor()
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id BIGINT) "
                    "TBLPROPERTIES ('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
    return db


def _tables(cursor, db):
    cursor.execute(f"SHOW TABLES IN {db}")
    return sorted(row[1] for row in cursor.fetchall())


def _views(cursor, db):
    cursor.execute(f"SHOW VIEWS IN {db}_fresh")
    return sorted(row[1] for row in cursor.fetchall())


@pytest.mark.parametrize("user", ["rita", "will", "ann"])
@pytest.mark.parametrize("template", SMUGGLED)
def test_ddl_smuggled_behind_a_comment_runs_as_the_select_spark_parses(auth_gateway, server, tiered, user,
                                                                       template):
    db = tiered
    with login(auth_gateway, user) as conn, login(auth_gateway, "ann") as admin:
        cur, a = conn.cursor(), admin.cursor()
        for ddl in [f"DROP TABLE {db}.t",
                    f"ALTER TABLE {db}.t RENAME TO {db}.moved",
                    f"ALTER TABLE {db}.t SET TBLPROPERTIES ('table.datalake.freshness'='1 s')",
                    f"CREATE TABLE {db}.made (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true')"]:
            cur.execute(template.format(ddl=ddl))
            assert cur.fetchall() == [(1,)]
            assert _tables(a, db) == ["t"]
            assert _views(a, db) == ["t"]
            a.execute(f"SHOW TBLPROPERTIES {db}.t ('table.datalake.freshness')")
            assert a.fetchall()[0][1] == "1 h"
        a.execute(f"SELECT count(*) FROM sys.tiering_tables WHERE database_name = '{db}'")
        assert a.fetchall() == [(1,)]


def test_the_real_ddl_still_needs_admin_and_keeps_the_fresh_view_with_its_table(auth_gateway, tiered):
    db = tiered
    with login(auth_gateway, "will") as writer, login(auth_gateway, "ann") as admin:
        w, a = writer.cursor(), admin.cursor()
        state, message = sql_error(w, f"ALTER TABLE {db}.t RENAME TO {db}.t2")
        assert state == "42501" and "needs the admin role" in message
        a.execute(f"CREATE TABLE {db}.gone (id BIGINT) "
                  "TBLPROPERTIES ('table.datalake.enabled'='true', 'table.datalake.freshness'='1 h')")
        a.execute(f"ALTER TABLE {db}.gone RENAME TO {db}.moved")
        assert _views(a, db) == ["moved", "t"]
        a.execute(f"DROP TABLE {db}.moved")
        assert _tables(a, db) == ["t"] and _views(a, db) == ["t"]


def test_ddl_the_gateway_runs_itself_needs_admin_whatever_the_client_session_parsed(server, password_file):
    """Defence in depth: the client's session authorised a reader's statement,
    but the handler would run it as DDL (a session setting that changed the
    parse, say): refused unless the user is an admin."""
    from tierlake.server.app import gateway_from_config
    from tierlake.server.config.config import Config
    from tierlake.server.gateway.auth.authz import SparkSessions
    from tierlake.server.gateway.routing.handler import CallHandler, DdlHandler
    from tierlake.server.gateway.routing.router import Router
    from tierlake.server.gateway.transport.protocol import LocalResult
    from tierlake.server.sqlapi.roles import ADMIN

    marker = "SELECT 'taken as ddl' AS x"

    class Marker(DdlHandler):
        """A DDL route that takes the marker query (as a session setting that changed the parse might)."""

        def claim(self, statement):
            return statement.text == marker

        def execute(self, statement):
            return LocalResult(columns=[("x", "string")], rows=[("ran",)])

    assert Marker.role == ADMIN
    handler = Router([Marker(server.context), CallHandler(server.registry, server.context)])

    config = Config(home=server.config.home, values={**server.config.values, "tierlake.gateway.port": "0",
                                                     "tierlake.gateway.password-file": str(password_file)})
    gw = gateway_from_config(config, handler, server.thrift_port,
                             server.registry, backend_secret=server.internal_secret)
    gw.authorizer.attach(SparkSessions(server.spark, server.thrift_server))
    gw.start()
    try:
        with login(gw, "rita") as reader, login(gw, "ann") as admin:
            state, message = sql_error(reader.cursor(), marker)
            assert state == "42501"
            assert message == ("permission denied: this DDL of a tiered table needs the admin role; "
                               "user 'rita' has reader")
            cur = admin.cursor()
            cur.execute(marker)
            assert cur.fetchall() == [("ran",)]
    finally:
        gw.stop()
