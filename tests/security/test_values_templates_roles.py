"""An INSERT template's analysed form (server/ingest/java/ValuesTemplates.java) serves only sessions
whose plans are checked as the same role (SessionRoles, bound by the authoriser): a reader sending a
writer's template is refused as before, and an admin's statement of it is analysed by Spark for the
admin's own role before a form serves it."""

from __future__ import annotations

import uuid

import pytest
from pyhive import exc, hive

from tests.security.conftest import PASSWORD
from tierlake.server.ingest.writer import StreamWriter

pytestmark = pytest.mark.integration


def _cursor(gateway, user):
    return hive.connect("127.0.0.1", gateway.port, username=user, password=PASSWORD[user], auth="CUSTOM").cursor()


def test_a_kept_form_serves_only_its_role(server, auth_gateway):
    db = "vt_" + uuid.uuid4().hex[:8]
    admin, writer, reader = (_cursor(auth_gateway, u) for u in ("ann", "will", "rita"))
    admin.execute(f"CREATE DATABASE {db}")
    admin.execute(f"CREATE TABLE {db}.t (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true')")
    counters = StreamWriter().counters
    before = counters()
    for n in range(4):
        writer.execute(f"INSERT INTO {db}.t (id, v) VALUES ({n}, 'w{n}')")
    middle = counters()
    assert middle["templatesKept"] == before["templatesKept"] + 1
    assert middle["templateHits"] >= before["templateHits"] + 3

    with pytest.raises(exc.OperationalError) as info:
        reader.execute(f"INSERT INTO {db}.t (id, v) VALUES (9, 'r')")
    assert "permission denied" in info.value.args[0].status.errorMessage

    admin.execute(f"INSERT INTO {db}.t (id, v) VALUES (10, 'a')")
    after = counters()
    # The admin's plans are checked as admin: the writer's form did not serve it; Spark analysed it.
    assert after["templatesKept"] == middle["templatesKept"] + 1
    assert after["templateHits"] == middle["templateHits"]

    jvm = server.spark.sparkContext._jvm
    sessions = auth_gateway.authorizer.sessions
    roles = {jvm.io.tierlake.internal.SessionRoles.of(s) for s in list(sessions._sessions.values())}
    assert {"writer", "admin"} <= roles
    admin.execute(f"SELECT id, v FROM {db}.t ORDER BY id")
    assert admin.fetchall() == [(0, "w0"), (1, "w1"), (2, "w2"), (3, "w3"), (10, "a")]
