"""sys.validate flags a lake table that differs from its stream (issue 51, item 1):
an admin may still write into a lake table (docs/security.md, "Writers and
tiered tables"), and `tierlake_lake_equals_stream` compares the lake, row by
row, with what the stream implies up to the lake's tiered position — a log
table's rows as a multiset, a primary-key table's latest change per key
(deletes removing the key, sequence-by ordering a commit's changes). Through
the real password gateway: the admin writes, a writer validates."""

from __future__ import annotations

import json
import uuid

import pytest
from pyhive import hive

from tests.conftest import running_workers, wait_for
from tests.security.conftest import PASSWORD
from tests.server.tiering.conftest import make_due, wait_tiered

CHECK = "tierlake_lake_equals_stream"


@pytest.fixture(scope="module")
def workers(server):
    yield from running_workers(server, 1)


def _cursor(gateway, user):
    return hive.connect("127.0.0.1", gateway.port, username=user, password=PASSWORD[user], auth="CUSTOM").cursor()


@pytest.fixture
def admin(auth_gateway):
    return _cursor(auth_gateway, "ann")


@pytest.fixture
def writer(auth_gateway):
    return _cursor(auth_gateway, "will")


def _db(admin) -> str:
    db = "lv_" + uuid.uuid4().hex[:8]
    admin.execute(f"CREATE DATABASE {db}")
    return db


def _create(admin, table, columns, **props):
    props = {"table.datalake.enabled": "true", "table.datalake.freshness": "1 s", **props}
    text = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    admin.execute(f"CREATE TABLE {table} ({columns}) TBLPROPERTIES ({text})")


def _tier(server, table, first: bool = False):
    if not first:
        make_due(server, table)
    return wait_tiered(server, table)


def comparison(cursor, table) -> dict:
    """The tierlake_lake_equals_stream row of sys.validate: success, observed (JSON), count, sample (JSON)."""
    cursor.execute(f"CALL sys.validate('{table}')")
    rows = [r for r in cursor.fetchall() if r[1].startswith(CHECK + "(")]
    assert len(rows) == 1, rows
    _, expectation, success, observed, count, sample = rows[0]
    return dict(expectation=expectation, success=success, observed=json.loads(observed), count=count,
                sample=json.loads(sample) if sample else None)


def _lake(admin, table, columns):
    admin.execute(f"SELECT {columns} FROM {table} ORDER BY {columns}")
    return admin.fetchall()


def test_an_admins_delete_from_a_primary_key_lake_is_flagged_with_its_key(server, workers, admin, writer):
    db = _db(admin)
    table = f"{db}.orders"
    _create(admin, table, "id BIGINT, v STRING", **{"primary-key": "id", "bucket.num": "2"})
    writer.execute(f"INSERT INTO {table} (id, v, _change_type) VALUES (1, 'a', '+I'), (2, 'b', '+I'), (3, 'c', '+I')")
    state = _tier(server, table, first=True)
    clean = comparison(writer, table)
    assert clean["success"] is True and clean["observed"]["status"] == "equal", clean
    assert clean["expectation"] == f'{CHECK}(position={state.tiered_position})'

    admin.execute(f"DELETE FROM {db}_lake.orders WHERE id = 2")
    flagged = comparison(writer, table)
    assert flagged["success"] is False, flagged
    assert flagged["observed"]["status"] == "differs"
    assert (flagged["observed"]["missing_rows"], flagged["observed"]["extra_rows"], flagged["count"]) == (1, 0, 1)
    assert flagged["sample"] == {"missing": [{"id": 2}], "extra": []}

    # A later round does not repair it (it merges on top of main): validate still says so.
    writer.execute(f"INSERT INTO {table} (id, v, _change_type) VALUES (4, 'd', '+I')")
    _tier(server, table)
    assert _lake(admin, f"{db}_lake.orders", "id, v") == [(1, "a"), (3, "c"), (4, "d")]
    still = comparison(writer, table)
    assert still["observed"]["status"] == "differs" and still["sample"]["missing"] == [{"id": 2}], still

    # An admin's UPDATE: the key's expected row is missing, the changed one extra.
    admin.execute(f"UPDATE {db}_lake.orders SET v = 'forged' WHERE id = 3")
    updated = comparison(writer, table)
    assert (updated["observed"]["missing_rows"], updated["observed"]["extra_rows"]) == (2, 1), updated
    assert updated["sample"] == {"missing": [{"id": 2}, {"id": 3}], "extra": [{"id": 3}]}
    assert updated["observed"]["other_commit_count"] == 2, updated  # the admin's DELETE and UPDATE

    # Recovery without a rebuild (docs/security.md): the keys' current rows again as +U changes.
    writer.execute(f"INSERT INTO {table} (id, v, _change_type) VALUES (2, 'b', '+U'), (3, 'c', '+U')")
    _tier(server, table)
    assert _lake(admin, f"{db}_lake.orders", "id, v") == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert comparison(writer, table)["success"] is True


def test_a_forged_row_in_a_log_lake_is_flagged(server, workers, admin, writer):
    db = _db(admin)
    table = f"{db}.events"
    _create(admin, table, "id BIGINT, msg STRING")
    writer.execute(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (2, 'b')")  # a duplicate row is data too
    _tier(server, table, first=True)
    writer.execute(f"INSERT INTO {table} VALUES (3, 'c')")
    _tier(server, table)
    assert comparison(writer, table)["observed"]["status"] == "equal"

    # Same row count as a lost row plus a forged one: only the rows tell.
    admin.execute(f"DELETE FROM {db}_lake.events WHERE id = 3")
    admin.execute(f"INSERT INTO {db}_lake.events VALUES (2, 'b')")
    flagged = comparison(writer, table)
    assert flagged["success"] is False and flagged["observed"]["status"] == "differs", flagged
    assert (flagged["observed"]["missing_rows"], flagged["observed"]["extra_rows"]) == (1, 1)
    assert flagged["sample"] == {"missing": [{"id": 3, "msg": "c"}], "extra": [{"id": 2, "msg": "b"}]}

    admin.execute(f"INSERT INTO {db}_lake.events VALUES (9, 'forged')")
    forged = comparison(writer, table)
    assert (forged["observed"]["missing_rows"], forged["observed"]["extra_rows"]) == (1, 2), forged
    assert {"id": 9, "msg": "forged"} in forged["sample"]["extra"]
    assert forged["observed"]["other_commit_count"] == 3, forged

    # A round on top of the admin's writes does not undo them; rolling main back to before them does, and
    # tiering goes on from the position that snapshot recorded (the round after them is tiered again).
    writer.execute(f"INSERT INTO {table} VALUES (4, 'd')")
    _tier(server, table)
    before = forged["observed"]["other_commits"][0]["parent_id"]
    admin.execute(f"CALL spark_catalog.system.rollback_to_snapshot('{db}_lake.events', {before})")
    # A lake-only change starts no round (server/coordinator/idle.py): run_maintenance runs one now.
    admin.execute(f"CALL sys.run_maintenance('{table}')")
    admin.fetchall()
    expected = [(1, "a"), (2, "b"), (2, "b"), (3, "c"), (4, "d")]
    wait_for(lambda: _lake(admin, f"{db}_lake.events", "id, msg") == expected, 60, "the lake re-tiered")
    assert comparison(writer, table)["observed"]["status"] == "equal"
    assert _lake(admin, f"{db}_lake.events", "id, msg") == expected


def _apply(model: dict, changes) -> None:
    """One commit of changes into the model of a primary-key lake: the last change per key wins,
    by sequence-by (ts) inside the commit; -D deletes, -U is ignored."""
    for key, value, ts, kind in sorted(changes, key=lambda c: c[2]):
        if kind == "-U":
            continue
        if kind == "-D":
            model.pop(key, None)
        else:
            model[key] = (value, ts)


@pytest.mark.parametrize("sequence_by", [True, False], ids=["sequence-by", "no-sequence-by"])
def test_an_untouched_lake_equals_its_stream_after_updates_deletes_and_reinserts(server, workers, admin, writer,
                                                                                sequence_by):
    db = _db(admin)
    table = f"{db}.kv"
    props = {"primary-key": "id", "bucket.num": "3"}
    if sequence_by:
        props["sequence-by"] = "ts"
    _create(admin, table, "id BIGINT, v STRING, ts BIGINT", **props)
    # Commits of one round each; keys repeat across and (with sequence-by, ordered by ts) within commits.
    commits = [
        [(1, "a", 1, "+I"), (2, "b", 1, "+I"), (3, "c", 1, "+I"), (4, "d", 1, "+I")],
        [(1, "a2", 2, "+U"), (2, None, 2, "-D"), (5, "e", 2, None), (1, "a", 2, "-U")],
        [(2, "b2", 3, "+I"), (3, None, 3, "-D"), (4, "d3", 3, "+U")],
        [(3, "c4", 4, "+I"), (5, None, 4, "-D"), (6, "f", 4, "+I"), (2, None, 4, "-D")],
    ]
    if sequence_by:  # one commit with several changes of a key, the later one first
        commits.append([(6, "f6", 6, "+U"), (6, "f5", 5, "+U"), (7, "g", 5, "+I"), (7, None, 6, "-D"),
                        (2, "b6", 6, "+I")])
    model: dict = {}
    for index, changes in enumerate(commits):
        values = ", ".join(f"({k}, {'NULL' if v is None else repr(v)}, {ts}, {'NULL' if c is None else repr(c)})"
                           for k, v, ts, c in changes)
        writer.execute(f"INSERT INTO {table} (id, v, ts, _change_type) VALUES {values}")
        _apply(model, changes)
        _tier(server, table, first=index == 0)
        if index == 2:
            # A KV snapshot midway: the comparison starts from the newest one at or before the lake's position.
            admin.execute(f"CALL sys.kv_snapshot('{table}')")
    expected = sorted((k, v, ts) for k, (v, ts) in model.items())
    assert _lake(admin, f"{db}_lake.kv", "id, v, ts") == expected
    clean = comparison(writer, table)
    assert clean["success"] is True, clean
    assert clean["observed"] == {"status": "equal", "missing_rows": 0, "extra_rows": 0,
                                 "compared_with": clean["observed"]["compared_with"]}
    assert clean["observed"]["compared_with"].startswith("KV snapshot "), clean
    assert clean["count"] == 0 and clean["sample"] is None

    # The same lake against the changelog from the stream's first commit (no KV snapshot to start from).
    from tierlake.server.catalog.spec import TieredSpec
    from tierlake.server.catalog.table_path import TablePath
    from tierlake.server.changelog.handle import TableHandle
    from tierlake.server.quality import lake_diff, suite

    spark = server.spark
    stream, lake = TablePath(db, "kv"), TablePath(f"{db}_lake", "kv")
    spec = TieredSpec.from_properties({k: v for k, v in props.items()})
    handle = TableHandle.loaded(spark, stream, lake, spec=spec)
    snapshot_id, position = suite._lake_snapshot(spark, suite.Target(None, handle, 0))
    replay = lake_diff.compare(handle, snapshot_id, position)
    assert (replay.status, replay.compared_with) == ("equal", "the stream's changes from its first commit"), replay

    # Against a lake with no snapshot yet every expected row is missing (the replay is not vacuous).
    empty = lake_diff.compare(handle, None, position)
    assert (empty.status, empty.missing_rows, empty.extra_rows) == ("differs", len(expected), 0), empty

    # A key the stream deleted, put back by an admin.
    admin.execute(f"INSERT INTO {db}_lake.kv VALUES (5, 'e', 2)")
    flagged = comparison(writer, table)
    assert (flagged["observed"]["missing_rows"], flagged["observed"]["extra_rows"]) == (0, 1), flagged
    assert flagged["sample"] == {"missing": [], "extra": [{"id": 5}]}, flagged


def test_an_untouched_log_lake_equals_its_stream_over_several_rounds(server, workers, admin, writer):
    db = _db(admin)
    table = f"{db}.log"
    _create(admin, table, "id BIGINT, tags MAP<STRING, INT>, note STRING", **{"table.datalake.freshness": "1 h"})
    for round_ in range(3):
        batch = [(i % 2, f"map('k', {round_})", "NULL" if i == 1 else f"'n{round_}'") for i in range(3)]
        writer.execute(f"INSERT INTO {table} VALUES " + ", ".join(f"({a}, {b}, {c})" for a, b, c in batch))
        _tier(server, table)  # each round made due by hand (freshness 1 h)
    writer.execute(f"INSERT INTO {table} VALUES (7, map('k', 7), 'not tiered yet')")  # beyond the lake's position
    assert comparison(writer, table)["observed"]["status"] == "equal"
    admin.execute(f"DELETE FROM {db}_lake.log WHERE id = 0 AND note = 'n1'")
    # A stream column renamed since: followed by its field id (the lake column may be renamed by a round meanwhile).
    admin.execute(f"ALTER TABLE {table} RENAME COLUMN note TO remark")
    flagged = comparison(writer, table)
    assert flagged["success"] is False, flagged
    assert (flagged["observed"]["missing_rows"], flagged["observed"]["extra_rows"]) == (2, 0), flagged
    [missing] = flagged["sample"]["missing"]
    assert sorted(missing.values(), key=str) == [0, "n1", '{"k":1}'], flagged
