"""Each statement is decided once (issue 52): through the real gateway, a tiered CREATE, a plain
SELECT and a tiered DROP are each parsed by Spark once over py4j, and no table is loaded more than
once while the gateway decides and runs the statement.

Counted at py4j itself, so that no path escapes: every call the gateway's statement threads make into
the JVM is seen. A parse is any call of Spark's parsers (``PlanWalker.parse``, ``sqlParser().parsePlan``,
``SparkSession.sql``) with the statement's text; a load is any catalog lookup that found a table
(``Spark3Util.loadIcebergTable``, ``Catalog.tableExists``, ``TableCatalog.loadTable``, the metastore's
``getTable``, ``SparkSession.table``). What Spark does inside the JVM once it runs a statement (the
Thrift server's own parse of a relayed SELECT, the catalog resolving a DROP) is Spark's execution,
not the gateway's decision, and is not counted."""

from __future__ import annotations

import collections
import re
import threading
import uuid

import pytest
from pyhive import hive

from tests.security.conftest import PASSWORD
from tests.server.tiering.conftest import run

pytestmark = pytest.mark.integration

PARSES = frozenset({"parse", "parsePlan", "sql"})
LOADS = frozenset({"loadIcebergTable", "tableExists", "loadTable", "getTable", "table"})
# The threads that decide and run a statement of a client (a synchronous one runs on its connection's).
STATEMENT_THREADS = ("tierlake-gateway-", "tierlake-statement-")


class Py4jCalls:
    """Every py4j call a gateway statement thread makes, by method name and string arguments."""

    def __init__(self, monkeypatch):
        from py4j.java_gateway import JavaMember

        self.calls: list[tuple[str, tuple[str, ...], bool]] = []
        self._lock = threading.Lock()
        original = JavaMember.__call__
        calls, lock = self.calls, self._lock

        def counting(member, *args):
            if not threading.current_thread().name.startswith(STATEMENT_THREADS):
                return original(member, *args)
            found = False
            try:
                result = original(member, *args)
                # A lookup that found nothing (a table about to be created) read no table.
                found = result is not False
                return result
            finally:
                with lock:
                    calls.append((member.name, tuple(a for a in args if isinstance(a, str)), found))

        monkeypatch.setattr(JavaMember, "__call__", counting)

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()

    def parses(self, text: str) -> int:
        with self._lock:
            return sum(1 for name, args, _ in self.calls if name in PARSES and text in args)

    def loads(self) -> collections.Counter:
        """Loads that found their table, by table: ``db.table``, whatever catalog prefix or quoting
        the call used (the metastore's ``getTable(db, table)`` names it in two arguments)."""
        counted: collections.Counter = collections.Counter()
        with self._lock:
            for name, args, found in self.calls:
                if name in LOADS and args and found:
                    parts = [p for a in args for p in re.split(r"\.", a.replace("`", "").lower()) if p]
                    counted[".".join(parts[-2:])] += 1
        return counted


def check_each_is_decided_once(gateway, user, password, monkeypatch) -> dict[str, tuple[int, dict]]:
    db = "once_" + uuid.uuid4().hex[:8]
    kwargs = {"password": password, "auth": "CUSTOM"} if password else {}
    conn = hive.connect("127.0.0.1", gateway.port, username=user, **kwargs)
    cursor = conn.cursor()
    run(cursor, f"CREATE DATABASE {db}")
    calls = Py4jCalls(monkeypatch)
    statements = {
        "CREATE": f"CREATE TABLE {db}.t (id BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true')",
        "SELECT": f"SELECT id, v FROM {db}.t WHERE id > 0",
        "DROP": f"DROP TABLE {db}.t",
    }
    seen = {}
    try:
        for kind, statement in statements.items():
            calls.clear()
            run(cursor, statement)
            seen[kind] = (calls.parses(statement), dict(calls.loads()))
    finally:
        monkeypatch.undo()
        run(cursor, f"DROP DATABASE IF EXISTS {db} CASCADE")
        conn.close()
    # What the statements did, as a user sees it: the tiered table was made, read and dropped.
    assert seen["CREATE"][1] or seen["DROP"][1], seen  # loads were counted at all (the counter works)
    return seen


def test_with_a_password_file_each_statement_is_parsed_once_and_each_table_loaded_at_most_once(
        auth_gateway, monkeypatch):
    seen = check_each_is_decided_once(auth_gateway, "ann", PASSWORD["ann"], monkeypatch)
    for kind, (parses, loads) in seen.items():
        assert parses == 1, (kind, seen)  # the authoriser's parse, which every route then reads
        assert all(n <= 1 for n in loads.values()), (kind, loads)


def test_in_development_mode_no_statement_is_parsed_twice(server, monkeypatch):
    seen = check_each_is_decided_once(server.gateway, "tester", None, monkeypatch)
    assert seen["SELECT"][0] == 0, seen  # no route's cheap test matched: relayed unparsed
    for kind, (parses, loads) in seen.items():
        assert parses <= 1, (kind, seen)
        assert all(n <= 1 for n in loads.values()), (kind, loads)
