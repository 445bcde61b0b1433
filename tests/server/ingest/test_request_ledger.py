"""Request ids outlive their stream snapshots (server/ingest/ledger.py,
docs/ingest.md): managed maintenance keeps few stream snapshots at any write
rate and moves the ids of those it expires to ``sys.write_requests``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pyhive import hive

from tests.server.tiering.conftest import make_due, run, wait_tiered
from tierlake.server.ingest.jvm import STREAM_INGEST
from tierlake.server.runtime.jvm import jclass
from tierlake.server.runtime.session import iceberg_table
from tierlake.server.state.housekeeping import Housekeeper
from tierlake.server.state.state_table import SmallTable


def snapshot_count(spark, table: str) -> int:
    return sum(1 for _ in iceberg_table(spark, table).snapshots())


def send(cursor, table: str, request_id: str, value: int) -> None:
    cursor.execute(f"SET `tierlake.write.request-id`={request_id}")
    run(cursor, f"INSERT INTO {table} VALUES ({value})")


def test_request_ids_outlive_the_stream_snapshots_maintenance_expires(server, workers, spark, hive_cursor, db):
    table = f"{db}.events"
    run(hive_cursor, f"CREATE TABLE {table} (id BIGINT) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'table.datalake.freshness'='1 h', 'table.datalake.stream.max-snapshots'='3', "
                     "'table.datalake.snapshot.min-retained'='1')")
    with hive.connect("127.0.0.1", server.gateway.port, username="tester") as conn:
        cursor = conn.cursor()
        for n in range(8):  # one snapshot each
            send(cursor, table, f"batch-{n}", n)
        # Another application's write carries its id in its snapshot only; the
        # plain inserts after it push it out of the newest three, so it is
        # expired before the gateway's committer ever indexed it.
        # (It tags its write with the key the gateway records tester's id "external-1" under.)
        keys = server.gateway.handler.settings._keys
        (spark.createDataFrame([(100,)], "id BIGINT").writeTo(table)
         .option("snapshot-property.tierlake.write.request-id", keys.key("tester", "external-1")).append())
        for n in range(4):
            spark.sql(f"INSERT INTO {table} VALUES ({200 + n})")
        make_due(server, table)
        wait_tiered(server, table)
        before = snapshot_count(spark, table)
        done = run(hive_cursor, f"CALL sys.run_maintenance('{table}')")
        expired = next(r for r in done if r[2] == "stream_expire_snapshots")
        assert snapshot_count(spark, table) <= 3 < before, (before, expired)

        ledger = spark.sql("SELECT request_id FROM sys.write_requests WHERE table_uuid = "
                           f"'{iceberg_table(spark, table).uuid()}'").collect()
        assert {r.request_id for r in ledger} == {keys.key("tester", f"batch-{n}") for n in range(8)} | {
            keys.key("tester", "external-1")}
        # Retries of expired writes: the committer that saw them, and the one that never did.
        send(cursor, table, "batch-0", 0)
        send(cursor, table, "external-1", 100)
        # A restarted server's committer starts from the snapshots and the ledger.
        jclass(STREAM_INGEST, spark.sparkContext._jvm).reset()
        send(cursor, table, "batch-3", 3)
        send(cursor, table, "batch-new", 300)
    ids = sorted(r.id for r in spark.sql(f"SELECT id FROM {table}").collect())
    assert ids == list(range(8)) + [100, 200, 201, 202, 203, 300]


def test_the_ledger_forgets_ids_after_the_retention(server, spark):
    ledger = SmallTable(spark, "sys.write_requests")
    now = datetime.now(timezone.utc)
    retention = server.config.duration("tierlake.write.request-id-retention")
    uuid = "00000000-0000-0000-0000-00000000beef"
    old = now - retention - timedelta(minutes=1)
    ledger.append([
        {"table_uuid": uuid, "request_id": "old", "snapshot_id": 1, "committed_at": old},
        {"table_uuid": uuid, "request_id": "recent", "snapshot_id": 2, "committed_at": now - timedelta(seconds=5)},
    ])
    # The committer's view: ids within the retention only.
    found = jclass(STREAM_INGEST, spark.sparkContext._jvm).ledgerIds(uuid)
    assert set(found.keySet()) == {"recent"}
    # The housekeeping deletes the old row at every pass, not only the slow ones.
    done = Housekeeper(spark, server.config).run_pass(slow=False)
    assert done["retention"].get("sys.write_requests", 0) >= 1, done
    left = spark.sql(f"SELECT request_id FROM sys.write_requests WHERE table_uuid = '{uuid}'").collect()
    assert [r.request_id for r in left] == ["recent"]


def test_a_primary_key_stream_stays_bounded_through_kv_snapshots(server, workers, spark, hive_cursor, db,
                                                                 monkeypatch):
    from tierlake.server.maintenance import tables as table_maintenance

    monkeypatch.setattr(table_maintenance, "KV_PRESSURE_MIN_GAP_S", 0)
    table = f"{db}.accounts"
    run(hive_cursor, f"CREATE TABLE {table} (id BIGINT, balance BIGINT) TBLPROPERTIES ("
                     "'table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='2', "
                     "'table.datalake.freshness'='1 h', 'table.datalake.stream.max-snapshots'='3', "
                     "'table.datalake.snapshot.min-retained'='1')")
    model: dict[int, int] = {}
    kinds = []
    with hive.connect("127.0.0.1", server.gateway.port, username="tester") as conn:
        cursor = conn.cursor()
        for batch in range(4):
            for n in range(6):  # one snapshot each; keys repeat across batches (updates)
                key, balance = (batch * 6 + n) % 10, batch * 100 + n
                run(cursor, f"INSERT INTO {table} (id, balance, _change_type) VALUES ({key}, {balance}, '+U')")
                model[key] = balance
            make_due(server, table)
            wait_tiered(server, table)
            done = run(hive_cursor, f"CALL sys.run_maintenance('{table}')")
            kinds.append({r[2]: r for r in done})
            # The KV snapshot taken for the bound let the tiered snapshots go.
            assert snapshot_count(spark, table) <= 3, kinds[-1]
    assert all("KV snapshot" in (k["kv_snapshot"][-2] or "") for k in kinds), kinds
    assert any((k["kv_compaction"][5] or 0) > 0 for k in kinds), kinds
    lake = {r.id: r.balance for r in spark.sql(f"SELECT id, balance FROM {db}_lake.accounts").collect()}
    assert lake == model
    # The newest KV snapshot holds the same state (it was taken at the tiered end).
    kv_table = dict(iceberg_table(spark, table).properties())["tierlake.kv-table"]
    state = {r.id: r.balance for r in spark.sql(f"SELECT id, balance FROM {kv_table}").collect()}
    assert state == model
