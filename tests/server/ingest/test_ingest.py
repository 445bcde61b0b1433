"""INSERTs into stream tables through the real gateway (server/ingest/writer.py, docs/ingest.md)."""

from __future__ import annotations

import random
import threading
import time
from decimal import Decimal

import pytest
from pyhive import hive

from tests.server.tiering.conftest import run, wait_tiered
from tierlake.server.ingest.writer import StreamWriter


def connect(server):
    return hive.connect("127.0.0.1", server.gateway.port, username="tester")


def snapshots(spark, table: str) -> int:
    return spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]


def error_of(cursor, statement: str) -> str:
    with pytest.raises(Exception) as info:
        cursor.execute(statement)
    status = info.value.args[0].status
    return f"{status.sqlState} {status.errorMessage}"


def pk_table(cursor, db: str, name: str = "orders", extra: str = "") -> str:
    run(cursor, f"CREATE TABLE {db}.{name} (id BIGINT, amount DOUBLE, status STRING) TBLPROPERTIES "
                f"('table.datalake.enabled'='true', 'primary-key'='id', 'bucket.num'='4'{extra})")
    return f"{db}.{name}"


def test_values_take_the_direct_path_and_a_query_runs_in_spark(server, spark, hive_cursor, db):
    table = pk_table(hive_cursor, db)
    jsession = spark._jsparkSession
    writer = StreamWriter()
    values = writer.stage(jsession, f"INSERT INTO {table} (id, amount, status, _change_type) VALUES (1, 2, 'a', '+I')")
    query = writer.stage(jsession, f"INSERT INTO {table} SELECT id, amount, status, '+I' FROM {table}")
    assert (values.local, values.rows, query.local, query.rows) == (True, 1, False, -1)
    assert values.spec.primary_key == ["id"]
    # Not a stream table, not an append: Spark's, as before.
    spark.sql(f"CREATE TABLE {db}.plain (id BIGINT) USING iceberg")
    assert writer.stage(jsession, f"INSERT INTO {db}.plain VALUES (1)") is None
    assert writer.stage(jsession, f"INSERT OVERWRITE {table} SELECT * FROM {table}") is None
    assert writer.stage(jsession, f"SELECT * FROM {table}") is None

    before = writer.counters()["statements"]
    run(hive_cursor, f"INSERT INTO {table} (id, amount, status, _change_type) VALUES (1, 9.5, 'new', '+I'), "
                     f"(2, 3, 'x', NULL)")
    run(hive_cursor, f"INSERT INTO {table} SELECT id + 10, amount, status, '+I' FROM {table}")
    assert writer.counters()["statements"] == before + 2
    rows = spark.sql(f"SELECT id, amount, status, _change_type FROM {table} ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(1, 9.5, "new", "+I"), (2, 3.0, "x", None), (11, 9.5, "new", "+I"),
                                        (12, 3.0, "x", "+I")]
    hive_cursor.execute(f"SELECT count(*) FROM {db}_fresh.orders")
    assert hive_cursor.fetchall() == [(4,)]


def test_values_are_cast_exactly_as_spark_casts_them(server, spark, hive_cursor, db):
    """Spark's analysis decides types and casts: the same VALUES into a stream
    table (no Spark job) and into a plain Iceberg table (Spark) give the same rows."""
    columns = "k STRING, price DECIMAL(10, 2), ts TIMESTAMP, day DATE, n INT, f FLOAT, b BOOLEAN, bin BINARY"
    run(hive_cursor, f"CREATE TABLE {db}.typed ({columns}) TBLPROPERTIES ('table.datalake.enabled'='true', "
                     "'primary-key'='k', 'bucket.num'='3')")
    spark.sql(f"CREATE TABLE {db}.typed_plain ({columns}, _change_type STRING) USING iceberg")
    values = ("VALUES ('a', 1.25, timestamp'2026-01-02 03:04:05.123456', date'2026-02-03', 7, CAST(1.5 AS FLOAT), "
              "true, X'CAFE', '+I'), "
              "('bé', 12.50, timestamp'2020-01-01 00:00:00', date'2020-01-01', 42, CAST(2 AS FLOAT), false, NULL, "
              "NULL), "
              "('c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, '-D')")
    for table in ("typed", "typed_plain"):
        run(hive_cursor, f"INSERT INTO {db}.{table} (k, price, ts, day, n, f, b, bin, _change_type) {values}")
    query = "SELECT k, price, ts, day, n, f, b, hex(bin), _change_type FROM {} ORDER BY k"
    got = spark.sql(query.format(f"{db}.typed")).collect()
    assert got == spark.sql(query.format(f"{db}.typed_plain")).collect()
    assert got[0].price == Decimal("1.25") and got[1].n == 42
    # Rows of one key share its bucket's file: one file per bucket present.
    files = spark.sql(f"SELECT partition FROM {db}.typed.files").collect()
    assert len(files) == len({str(f.partition) for f in files})


def test_bad_change_types_and_null_keys_are_refused_at_insert(server, spark, hive_cursor, db):
    table = pk_table(hive_cursor, db)
    run(hive_cursor, f"INSERT INTO {table} (id, amount, status, _change_type) VALUES (1, 1, 'a', '+I')")
    before = snapshots(spark, table)
    text = error_of(hive_cursor, f"INSERT INTO {table} (id, amount, status, _change_type) "
                                 f"VALUES (2, 1, 'a', '+X'), (3, 1, 'a', 'U'), (4, 1, 'a', '+X')")
    assert text.startswith("22023 ") and "3 row(s) with a _change_type outside +I, -U, +U, -D or NULL (upsert): " \
        "'+X' (2 rows), 'U' (1 row). Nothing was written" in text, text
    text = error_of(hive_cursor, f"INSERT INTO {table} (id, amount, status, _change_type) "
                                 f"VALUES (NULL, 1, 'a', '+I'), (5, 1, 'a', NULL), (NULL, 2, 'b', NULL)")
    assert text.startswith("23502 ") and "2 row(s) with a NULL key column (id)" in text, text
    # A query: checked while it runs (the first bad value).
    text = error_of(hive_cursor, f"INSERT INTO {table} SELECT id + 1, amount, status, 'upsert' FROM {table}")
    assert text.startswith("22023 ") and "outside +I, -U, +U, -D or NULL (upsert): upsert" in text, text
    text = error_of(hive_cursor, f"INSERT INTO {table} SELECT CAST(NULL AS BIGINT), amount, status, '+I' "
                                 f"FROM {table}")
    assert text.startswith("23502 ") and "NULL key column (id)" in text, text
    # Different changes to one key in one statement: tiering could not order them.
    text = error_of(hive_cursor, f"INSERT INTO {table} (id, amount, status, _change_type) "
                                 f"VALUES (7, 1, 'a', '+U'), (8, 1, 'a', '+I'), (7, 2, 'a', '+U'), (8, 1, 'a', '-D')")
    assert text.startswith("21000 ") and "2 key(s) with different changes in one statement" in text \
        and "e.g. key (id=7)" in text and "declare 'sequence-by'" in text, text
    assert snapshots(spark, table) == before
    assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 1
    # The same change twice, or with a -U, is no conflict.
    run(hive_cursor, f"INSERT INTO {table} (id, amount, status, _change_type) "
                     f"VALUES (9, 1, 'a', '+U'), (9, 1, 'a', '+U'), (9, 5, 'z', '-U')")
    # With sequence-by, distinct values order them; a tie at the largest does not.
    seq = f"{db}.seq"
    run(hive_cursor, f"CREATE TABLE {seq} (id BIGINT, version INT, v STRING) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'primary-key'='id', 'sequence-by'='version')")
    run(hive_cursor, f"INSERT INTO {seq} (id, version, v, _change_type) VALUES (1, 1, 'a', '+U'), (1, 2, 'b', '+U')")
    text = error_of(hive_cursor, f"INSERT INTO {seq} (id, version, v, _change_type) "
                                 f"VALUES (2, 3, 'a', '+U'), (2, 3, 'b', '+U'), (2, 1, 'c', '+U')")
    assert text.startswith("21000 ") and "sequence-by values (version) are NULL or tie" in text, text
    # A log table has no change types or keys to check.
    run(hive_cursor, f"CREATE TABLE {db}.log (id BIGINT, msg STRING) TBLPROPERTIES ('table.datalake.enabled'='true')")
    run(hive_cursor, f"INSERT INTO {db}.log VALUES (NULL, NULL)")
    assert spark.sql(f"SELECT count(*) FROM {db}.log").first()[0] == 1


FIRST_WRITE = "(1, 1, 'a', '+I'), (2, 2, 'b', NULL)"


def test_a_retried_request_id_writes_nothing(server, spark, db):
    with connect(server) as first:
        cursor = first.cursor()
        table = pk_table(cursor, db)
        cursor.execute("SET `tierlake.write.request-id`=order-batch-42")
        run(cursor, f"INSERT INTO {table} (id, amount, status, _change_type) VALUES {FIRST_WRITE}")
        # The id named that write only: the next one is written.
        run(cursor, f"INSERT INTO {table} (id, amount, status, _change_type) VALUES (3, 3, 'c', '+I')")
    with connect(server) as retry:  # a client that lost its connection sends the same write again
        cursor = retry.cursor()
        cursor.execute("SET `tierlake.write.request-id`=order-batch-42")
        run(cursor, f"INSERT INTO {table} (id, amount, status, _change_type) VALUES {FIRST_WRITE}")
        cursor.execute("SET `tierlake.write.request-id`=order-batch-42")
        run(cursor, f"INSERT INTO {table} SELECT 9, 9, 'z', '+I'")  # the same id on a query: also nothing
        text = error_of(cursor, "SET `tierlake.write.request-id`=" + "x" * 300)  # refused at the SET
        assert text.startswith("22023 ") and "at most 256 are allowed" in text
    rows = spark.sql(f"SELECT id FROM {table} ORDER BY id").collect()
    assert [r.id for r in rows] == [1, 2, 3]
    summaries = spark.sql(f"SELECT summary['tierlake.write.request-id'] AS rid FROM {table}.snapshots "
                          "WHERE summary['tierlake.write.request-id'] IS NOT NULL").collect()
    # The snapshot carries a keyed hash of (user, id), not the id (server/ingest/request_ids.py).
    assert [r.rid for r in summaries] == [server.gateway.handler.settings._keys.key("tester", "order-batch-42")]


def test_a_reader_may_not_tag_writes(server, spark, hive_cursor, db):
    from tierlake.server.gateway.auth.planauth import setting_requirement
    from tierlake.server.sqlapi import roles

    assert setting_requirement("tierlake.write.request-id", "r1").role == roles.WRITER


def _writer(server, table: str, pk: bool, statements: int, rows: int, seed: int, log: list, errors: list):
    rnd = random.Random(seed)
    try:
        with connect(server) as conn:
            cursor = conn.cursor()
            for i in range(statements):
                if pk:
                    key = rnd.randrange(40)
                    value = seed * 1000 + i
                    sent = time.monotonic()
                    cursor.execute(f"INSERT INTO {table} (id, amount, status, _change_type) "
                                   f"VALUES ({key}, {value}, 'w{seed}', '+U')")
                    log.append((key, value, sent, time.monotonic()))
                else:
                    ids = [seed * 100_000 + i * rows + r for r in range(rows)]
                    cursor.execute(f"INSERT INTO {table} (id, msg) VALUES "
                                   + ", ".join(f"({x}, 'w{seed}')" for x in ids))
                    log.extend(ids)
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(repr(e))


def test_sixteen_concurrent_writers_are_tiered_exactly_once(server, spark, hive_cursor, db, workers):
    """16 sessions write one log and one primary-key table while tiering runs:
    no client error, every acknowledged row in the lake once, and each key's
    lake row comes from a write no later acknowledged write of it followed."""
    run(hive_cursor, f"CREATE TABLE {db}.events (id BIGINT, msg STRING) TBLPROPERTIES "
                     "('table.datalake.enabled'='true', 'table.datalake.freshness'='2 s')")
    pk_table(hive_cursor, db, extra=", 'table.datalake.freshness'='2 s'")
    log_acks, pk_acks, errors = [], [], []
    threads = [threading.Thread(target=_writer, args=(server, f"{db}.events", False, 12, 20, n, log_acks, errors))
               for n in range(8)]
    threads += [threading.Thread(target=_writer, args=(server, f"{db}.orders", True, 12, 1, n, pk_acks, errors))
                for n in range(8, 16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert errors == []
    assert len(log_acks) == 8 * 12 * 20 and len(pk_acks) == 8 * 12
    wait_tiered(server, f"{db}.events")
    wait_tiered(server, f"{db}.orders")
    lake = spark.sql(f"SELECT id, count(*) AS n FROM {db}_lake.events GROUP BY id").collect()
    assert sorted(r.id for r in lake) == sorted(log_acks) and {r.n for r in lake} == {1}
    got = {r.id: r.amount for r in spark.sql(f"SELECT id, amount FROM {db}_lake.orders").collect()}
    assert set(got) == {k for k, *_ in pk_acks}
    for key, amount in got.items():
        writes = [w for w in pk_acks if w[0] == key]
        winner = next(w for w in writes if w[1] == amount)
        later = [w for w in writes if w[2] > winner[3]]  # sent after the winner was acknowledged
        assert later == [], (key, winner, later)


@pytest.mark.parametrize("doc, order_id", [("ingest.md", 7), ("clients.md", 8)])
def test_the_retry_examples_of_the_docs_run_as_written(server, spark, hive_cursor, doc, order_id):
    """The PyHive request-id examples of docs/ingest.md and docs/clients.md,
    each run twice (a client's retry): one write."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / doc).read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "tierlake.write.request-id" in b)
    spark.sql("CREATE DATABASE IF NOT EXISTS shop")
    run(hive_cursor, "CREATE TABLE IF NOT EXISTS shop.orders (order_id BIGINT, amount DOUBLE, status STRING, "
                     "ts TIMESTAMP) TBLPROPERTIES ('table.datalake.enabled'='true', 'primary-key'='order_id', "
                     "'bucket.num'='4', 'table.datalake.freshness'='10 s', 'sequence-by'='ts')")
    count = f"SELECT count(*) FROM shop.orders WHERE order_id = {order_id} AND status = 'paid'"
    before = spark.sql(count).first()[0]
    for _ in range(2):
        exec(compile(block.replace("10000", str(server.gateway.port)), "docs/ingest.md", "exec"), {})
    assert spark.sql(count).first()[0] == before + 1
