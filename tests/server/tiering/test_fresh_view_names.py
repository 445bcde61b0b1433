"""A reader queries a fresh view, never the ``tierlake_inc`` relations behind it
(server/changelog/java/IncrementalCatalog.java, FreshMerge.java): the merged
names ``winners_after_…`` (primary-key tables) and ``pending_after_…`` (log
tables) are refused to a plain reader at the gateway with a permission error
naming the relation, whether the name is the one the view really reads or a
malformed one, while the same reader reads the view itself; nor may a reader
``USE`` the catalog to name them without it (refused on Spark's resolved plan,
server/gateway/auth/java/AuthzCheck.java).

Readers connect through a gateway with a password file, as the security tests
do (tests/security/conftest.py), in front of the shared server.
"""

from __future__ import annotations

import itertools
import re

import pytest
from pyhive import exc, hive

from tests.security.conftest import configured_gateway
from tests.server.tiering.conftest import run
from tests.server.tiering.test_fresh_views import force_round, view_text

pytestmark = pytest.mark.integration

DB = "fresh_names"
READER, READER_PASSWORD = "fresh_reader", "fresh-reader-pw"
_counter = itertools.count()
MERGED_NAME = re.compile(
    r"(?:winners|pending)_after_\d+_at_\d+(?:_keys(?:_\d+)+_seq_(?:\d+|none)_change_(?:\d+|none))?")


@pytest.fixture(scope="module")
def reader_gateway(server, tmp_path_factory):
    from tierlake.server.gateway.auth.passwords import set_user

    passwords = tmp_path_factory.mktemp("fresh-names-auth") / "passwords"
    set_user(passwords, READER, READER_PASSWORD, frozenset({"reader"}))
    gw = configured_gateway(server, **{"tierlake.gateway.password-file": str(passwords)})
    yield gw
    gw.stop()


@pytest.fixture
def reader(reader_gateway):
    """A cursor of a user who holds the reader role only."""
    conn = hive.connect("127.0.0.1", reader_gateway.port, username=READER, password=READER_PASSWORD,
                        auth="CUSTOM")
    yield conn.cursor()
    conn.close()


def refusal(cursor, statement: str) -> str | None:
    """The error text the client gets for ``statement``; None when it ran (its rows fetched)."""
    try:
        cursor.execute(statement)
        # A command (USE) answers a bare "Result" column with no rows to fetch.
        if cursor.description and [d[0] for d in cursor.description] != ["Result"]:
            cursor.fetchall()
    except exc.OperationalError as e:
        return e.args[0].status.errorMessage
    return None


def denied_text(relation: str) -> str:
    return (f"permission denied: a query of {relation} (another catalog, or not a table of the session "
            f"catalog) needs the admin role; user '{READER}' has reader")


def pinned_with_pending(cursor, spark, pk: bool) -> tuple[str, str, str, list[tuple]]:
    """A tiered table whose view was pinned by a round, with a commit pending after it: (table
    name, the merged relation name its view reads, the view, the rows the view must show)."""
    name = f"n{next(_counter)}_{'pk' if pk else 'log'}"
    run(cursor, f"CREATE DATABASE IF NOT EXISTS {DB}")
    props = "'table.datalake.enabled'='true', 'table.datalake.freshness'='1 h'"
    if pk:
        props += ", 'primary-key'='id', 'bucket.num'='2', 'sequence-by'='seq'"
    run(cursor, f"CREATE TABLE {DB}.{name} (id BIGINT, v DOUBLE, seq BIGINT) TBLPROPERTIES ({props})")
    table, fresh = f"{DB}.{name}", f"{DB}_fresh.{name}"
    if pk:
        run(cursor, f"INSERT INTO {table} (id, v, seq, _change_type) VALUES (1, 1.0, 0, '+I'), (2, 2.0, 1, NULL)")
        force_round(spark, table)
        run(cursor, f"INSERT INTO {table} (id, v, seq, _change_type) VALUES (2, 5.0, 0, '+U'), (3, 3.0, 1, '+I')")
        expected = [(1, 1.0), (2, 5.0), (3, 3.0)]
    else:
        run(cursor, f"INSERT INTO {table} VALUES (1, 1.0, 0), (2, 2.0, 1)")
        force_round(spark, table)
        run(cursor, f"INSERT INTO {table} VALUES (2, 5.0, 0), (3, 3.0, 1)")
        expected = [(1, 1.0), (2, 2.0), (2, 5.0), (3, 3.0)]
    merged = set(MERGED_NAME.findall(view_text(spark, fresh)))
    assert len(merged) == 1, merged
    relation = merged.pop()
    assert relation.startswith("winners_after_" if pk else "pending_after_"), relation
    return name, relation, fresh, expected


@pytest.mark.parametrize("pk", [True, False], ids=["pk", "log"])
def test_a_reader_reads_the_view_but_not_the_relations_it_names(hive_cursor, spark, reader, pk):
    name, relation, fresh, expected = pinned_with_pending(hive_cursor, spark, pk)
    reader.execute(f"SELECT id, v FROM {fresh} ORDER BY id, v")
    assert [tuple(r) for r in reader.fetchall()] == expected

    # The view's own relation, as a client would copy it out of SHOW CREATE TABLE, quoted or not.
    for statement in (f"SELECT * FROM tierlake_inc.{DB}.{name}.{relation}",
                      f"SELECT * FROM tierlake_inc.`{DB}`.`{name}`.`{relation}`",
                      f"SELECT count(*) FROM {fresh} JOIN tierlake_inc.{DB}.{name}.{relation} r USING (id)"):
        assert refusal(reader, statement) == denied_text(f"tierlake_inc.{DB}.{name}.{relation}"), statement

    # Malformed names are refused the same way, before the catalog parses them: the reader never
    # sees the catalog's own errors (no such table, a number that does not parse). Quoted: "-1"
    # would not parse as a name otherwise.
    start, position = re.match(r"\w+?_after_(\d+)_at_(\d+)", relation).groups()
    keyed = "_keys_1_seq_none_change_none"
    malformed = [
        ["tierlake_inc", DB, name, f"winners_after_{start}"],
        ["tierlake_inc", DB, name, f"pending_after_{start}"],
        ["tierlake_inc", DB, name, f"winners_after_{start}_at_{position}"],
        ["tierlake_inc", DB, name, f"pending_after_{start}_at_{position}{keyed}"],
        ["tierlake_inc", DB, name, f"winners_after_x_at_{position}{keyed}"],
        ["tierlake_inc", DB, name, f"winners_after_99999999999999999999999_at_{position}{keyed}"],
        ["tierlake_inc", DB, name, f"pending_after_{start}_at_-1"],
        ["tierlake_inc", DB, relation],
        ["tierlake_inc", DB, name, relation, "extra"],
        ["tierlake_inc", DB, "no_such_table", relation],
        ["TIERLAKE_INC", DB, name, relation.upper()],
    ]
    for parts in malformed:
        quoted = ".".join(f"`{p}`" for p in parts)
        assert refusal(reader, f"SELECT * FROM {quoted}") == denied_text(".".join(parts)), quoted

    # The denials leave the session usable.
    reader.execute(f"SELECT id, v FROM {fresh} ORDER BY id, v")
    assert [tuple(r) for r in reader.fetchall()] == expected


def test_use_of_the_incremental_catalog_does_not_open_its_names_to_a_reader(hive_cursor, spark, reader):
    """``USE tierlake_inc.<db>.<t>`` would make the merged relation a one-part name, which the gateway
    resolves against the session catalog: a reader may not USE another catalog (decided on Spark's
    resolved plan, server/gateway/auth/java/AuthzCheck.java), and stays where it was."""
    name, relation, fresh, expected = pinned_with_pending(hive_cursor, spark, pk=False)
    for target in (f"tierlake_inc.`{DB}`.`{name}`", f"tierlake_inc.{DB}", "`tierlake_inc`.x"):
        refused = refusal(reader, f"USE {target}")
        assert refused is not None and refused.endswith(
            "permission denied: USE of catalog tierlake_inc (another catalog than spark_catalog) needs the "
            "admin role (decided on Spark's resolved plan)"), refused
    refused = refusal(reader, f"SELECT * FROM `{relation}`")
    assert refused is not None and "TABLE_OR_VIEW_NOT_FOUND" in refused, refused  # still in the session catalog
    assert refusal(reader, f"USE spark_catalog.{DB}") is None  # the session catalog's databases stay open
    reader.execute(f"SELECT id, v FROM {fresh} ORDER BY id, v")
    assert [tuple(r) for r in reader.fetchall()] == expected
