"""Running for months (docs/design.md, 'Running for months'): bounded sys state after many coordinator
commits, and managed maintenance of lake and stream tables next to rounds."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.server.tiering.conftest import coordinator_state, make_due, run, wait_tiered
from tierlake.server.clients.procedure_client import LocalClient
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.state import housekeeping, state_version
from tierlake.server.state.housekeeping import COMMITS_BEFORE_EXPIRY

pytestmark = pytest.mark.integration


def metadata_files(spark, name: str) -> list[Path]:
    location = str(iceberg_table(spark, name).location()).removeprefix("file:")
    return list((Path(location) / "metadata").glob("*.metadata.json"))


def snapshots(spark, name: str) -> int:
    return sum(1 for _ in iceberg_table(spark, name).snapshots())


def test_sys_state_stays_bounded_after_many_coordinator_commits(server, spark, db):
    # A tiering job of our own drives the coordinator through the procedure
    # client (assign, finish, make due) until sys.tiering_tables made 60 more commits.
    spark.sql(f"CREATE TABLE {db}.beat (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    client = LocalClient(server)
    client.call("enable_tiering", table=f"{db}.beat")
    job, table = "bounded-" + uuid.uuid4().hex[:8], f"{db}.beat"

    def due_now(states, now):
        state = next(s for s in states.values() if s.path == table)
        if state.status.value != "Scheduled":
            return None, False, []
        state.next_due = now
        return None, True, []

    target, position = housekeeping.commits_total("sys.tiering_tables") + 60, [0]
    while housekeeping.commits_total("sys.tiering_tables") < target:
        server.coordinator.mutate(due_now)
        for kind, table_id, path, epoch, _ in client.call("heartbeat", job_id=job, request_table=True):
            if kind != "assigned":
                continue
            entry = {"table_id": table_id, "tiering_epoch": epoch}
            if path == table:
                # A new position each time: rounds that found nothing new are not history.
                position[0] += 1
                client.call("heartbeat", job_id=job, finished_tables=[dict(entry, tiered_position=position[0])])
            else:  # another module's table: hand it back
                client.call("heartbeat", job_id=job, failed_tables=[dict(entry, error_message="not this test's")])
    # Metadata files are deleted after each commit (5 previous versions kept),
    # snapshots expired once a table made COMMITS_BEFORE_EXPIRY commits.
    deadline = time.monotonic() + 60
    while snapshots(spark, "sys.tiering_tables") > COMMITS_BEFORE_EXPIRY and time.monotonic() < deadline:
        time.sleep(0.5)
    assert snapshots(spark, "sys.tiering_tables") <= COMMITS_BEFORE_EXPIRY
    # The round history is written behind the state (and other tables' rounds may be committing):
    # a commit in flight has written its new metadata file and not yet deleted the oldest one.
    state_version.settle()
    for name in ("sys.tiering_tables", "sys.tiering_round_log", "sys.tiering_jobs"):
        deadline = time.monotonic() + 30
        while len(metadata_files(spark, name)) > 6 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(metadata_files(spark, name)) <= 6, name
    # The state is intact: the table is still registered, its rounds recorded.
    assert client.call("list_tiering_statuses", table=table)[0][1] == "beat"
    state_version.settle()  # the round history is written behind the state
    assert spark.sql(f"SELECT count(*) FROM sys.tiering_rounds WHERE database_name = '{db}'").first()[0] > 0
    client.call("disable_tiering", table=table)


def lake_equals_stream(hive_cursor, db: str, table: str, columns: str) -> None:
    lake = Counter(tuple(r) for r in run(hive_cursor, f"SELECT {columns} FROM {db}_lake.{table}"))
    stream = Counter(tuple(r) for r in run(hive_cursor, f"SELECT {columns} FROM {db}.{table}"))
    assert lake == stream


def test_maintenance_and_rounds_on_one_table_never_fail_each_other(server, workers, hive_cursor, db, spark):
    props = ("'table.datalake.enabled'='true', 'table.datalake.freshness'='1 s', "
             "'table.datalake.snapshot.max-age'='0 s', 'table.datalake.snapshot.min-retained'='2'")
    run(hive_cursor, f"CREATE TABLE {db}.logs (id BIGINT, msg STRING) TBLPROPERTIES ({props})")
    run(hive_cursor, f"CREATE TABLE {db}.kv (k BIGINT, v STRING) TBLPROPERTIES ({props}, 'primary-key'='k', "
                     "'bucket.num'='1')")
    # Appends keep arriving while maintenance runs (and the rounds it waits for).
    stop, appended = threading.Event(), [0]

    def append():
        while not stop.is_set():
            spark.sql(f"INSERT INTO {db}.logs VALUES ({appended[0]}, 'bg')")
            appended[0] += 1
            stop.wait(0.5)

    # A file no snapshot references, in the stream's data directory: removed once older than three days
    # (a user's write could still be running before then), kept while younger.
    stream_data = Path(str(iceberg_table(spark, f"{db}.logs").location()).removeprefix("file:")) / "data"
    stream_data.mkdir(parents=True, exist_ok=True)
    old_orphan, young_orphan = stream_data / "orphan-old.parquet", stream_data / "orphan-young.parquet"
    for orphan in (old_orphan, young_orphan):
        orphan.write_bytes(b"not referenced")
    four_days_ago = time.time() - 4 * 24 * 3600
    os.utime(old_orphan, (four_days_ago, four_days_ago))
    done = []
    for loop in range(3):
        for i in range(6):
            run(hive_cursor, f"INSERT INTO {db}.logs VALUES ({1000 + loop * 10 + i}, 'fg')")
            run(hive_cursor, f"INSERT INTO {db}.kv (k, v, _change_type) VALUES ({i % 3}, 'v{loop}-{i}', "
                             f"'{'-D' if i == 5 else '+U'}')")
        for table in ("logs", "kv"):
            wait_tiered(server, f"{db}.{table}")
        stop.clear()
        writer = threading.Thread(target=append, daemon=True)
        writer.start()
        try:
            for table in ("logs", "kv"):
                kv_asked = datetime.now(timezone.utc)
                done += run(hive_cursor, f"CALL sys.run_maintenance('{db}.{table}')")
        finally:
            stop.set()
            writer.join(timeout=60)
    assert done and all(r[10] is None for r in done), [r for r in done if r[10]]
    kinds = {r[2] for r in done}
    # The primary-key table adds its KV actions (kv_compaction once it has a KV table).
    assert {"compaction", "expire_snapshots", "orphan_files", "stream_compaction", "stream_expire_snapshots",
            "stream_orphan_files", "kv_snapshot"} <= kinds <= {
        "compaction", "expire_snapshots", "orphan_files", "stream_compaction", "stream_expire_snapshots",
        "stream_orphan_files", "kv_snapshot", "kv_compaction"}
    assert sum(r[5] or 0 for r in done if r[2] == "compaction") > 0  # small files were rewritten
    for table in ("logs", "kv"):  # on the stream too
        assert sum(r[5] or 0 for r in done if r[2] == "stream_compaction" and r[1] == f"{db}.{table}") > 0
    assert not old_orphan.exists() and young_orphan.exists()
    assert sum(r[8] or 0 for r in done if r[2] == "stream_orphan_files" and r[1] == f"{db}.logs") >= 1
    assert sum(r[4] or 0 for r in done if r[2] == "expire_snapshots") > 0
    assert sum(r[4] or 0 for r in done if r[2] == "stream_expire_snapshots") > 0
    # Rows reached the lake exactly once, through every compaction and expiry.
    for table in ("logs", "kv"):
        make_due(server, f"{db}.{table}")
        wait_tiered(server, f"{db}.{table}")
    lake_equals_stream(hive_cursor, db, "logs", "id, msg")
    # Users' INSERTs into the stream no longer leave a metadata.json each behind. Counted once the table is
    # quiet: during a commit the new file exists before the oldest is deleted.
    assert len(metadata_files(spark, f"{db}.logs")) <= 6 and len(metadata_files(spark, f"{db}_lake.logs")) <= 6
    kv = dict(run(hive_cursor, f"SELECT k, v FROM {db}_lake.kv"))
    assert kv == {0: "v2-3", 1: "v2-4"}
    # No round failed (a round the heartbeat timeout re-queued on a loaded
    # machine is timed_out, not failed); every action is in the view, none with an error.
    rounds = run(hive_cursor, "SELECT outcome, error FROM sys.tiering_rounds WHERE database_name = %(db)s",
                 {"db": db})
    assert rounds and not [r for r in rounds if r[0] == "failed"], rounds
    seen = run(hive_cursor, "SELECT table_name, kind, run_trigger, error FROM sys.lake_maintenance "
                            "WHERE database_name = %(db)s", {"db": db})
    assert {(r[0], r[1]) for r in seen} >= {(t, k) for t in ("logs", "kv") for k in kinds
                                             if t == "kv" or not k.startswith("kv_")}
    assert all(r[3] is None for r in seen)
    # A stream snapshot the planner needs (the tiered position's) was kept.
    assert snapshots(spark, f"{db}.logs") >= 1
    # A restarted server's schedule continues from the history: its last run, read back with Spark.
    from tierlake.server.coordinator.maintenance_schedule import MaintenanceSchedule

    last = MaintenanceSchedule(server.coordinator)._last_in_history(coordinator_state(server, f"{db}.kv").table_id)
    assert last is not None and kv_asked - timedelta(seconds=1) <= last <= datetime.now(timezone.utc), (last, kv_asked)


def test_a_stream_that_gained_the_file_trigger_is_maintained_before_the_interval(server, workers, hive_cursor, db,
                                                                                 spark):
    from tierlake.server.coordinator.maintenance_schedule import FILES_TRIGGER
    from tierlake.server.runtime import iceberg_actions as im

    # The shared server's interval is the default 10 min: only the file trigger can bring the third run.
    run(hive_cursor, f"CREATE TABLE {db}.burst (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'table.datalake.freshness'='1 h')")
    for n in range(2):  # the first round sets the file base and carries no maintenance (a new table)
        spark.sql(f"INSERT INTO {db}.burst VALUES ({n})")
        make_due(server, f"{db}.burst")
        wait_tiered(server, f"{db}.burst")
    for n in range(FILES_TRIGGER):  # one data file each
        spark.sql(f"INSERT INTO {db}.burst VALUES ({100 + n})")
    before = im.data_file_counts(iceberg_table(spark, f"{db}.burst"))[0]
    assert before >= FILES_TRIGGER
    make_due(server, f"{db}.burst")
    wait_tiered(server, f"{db}.burst")
    runs = run(hive_cursor, "SELECT run_trigger, kind, files_rewritten, detail FROM sys.lake_maintenance "
                            "WHERE database_name = %(db)s AND table_name = 'burst' ORDER BY started_at", {"db": db})
    assert [r[0] for r in runs if r[1] == "stream_compaction"] == ["files"], runs
    compacted = next(r for r in runs if r[0] == "files" and r[1] == "stream_compaction")
    assert compacted[2] >= FILES_TRIGGER, compacted
    assert im.data_file_counts(iceberg_table(spark, f"{db}.burst"))[0] < before
    lake_equals_stream(hive_cursor, db, "burst", "id")


def test_lake_compaction_leaves_no_delete_files(server, workers, hive_cursor, db, spark):
    from tierlake.server.runtime import iceberg_actions as im

    run(hive_cursor, f"CREATE TABLE {db}.acct (k BIGINT, v STRING) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'primary-key'='k', 'bucket.num'='2', 'table.datalake.freshness'='1 h')")
    for n in range(3):  # each round's MERGE updates every key: merge-on-read delete files in the lake
        run(hive_cursor, f"INSERT INTO {db}.acct (k, v, _change_type) VALUES (1, 'a{n}', '+U'), (2, 'b{n}', '+U'), "
                         f"(3, 'c{n}', '+U')")
        make_due(server, f"{db}.acct")
        wait_tiered(server, f"{db}.acct")
    lake = f"{db}_lake.acct"
    assert im.data_file_counts(iceberg_table(spark, lake))[1] > 0
    done = run(hive_cursor, f"CALL sys.run_maintenance('{db}.acct')")
    compaction = next(r for r in done if r[2] == "compaction")
    assert compaction[10] is None and re.search(r"delete files [1-9]\d* -> 0$", compaction[9]), compaction
    assert im.data_file_counts(iceberg_table(spark, lake))[1] == 0
    assert dict(run(hive_cursor, f"SELECT k, v FROM {lake}")) == {1: "a2", 2: "b2", 3: "c2"}
