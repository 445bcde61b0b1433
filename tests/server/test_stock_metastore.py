"""A stock Hive metastore service as the shared catalog (issue: acknowledged
commits vanished there). The server and a separate tiering service both name
it with ``hive.metastore.uris``: neither can run tierlake's compare-and-set in
it, so both keep Iceberg's metastore locks, and concurrent gateway writers and
two tiering jobs on the same tables lose no acknowledged commit and tier each
row exactly once."""

from __future__ import annotations

import re
import subprocess
import threading
import time
import urllib.request

import pytest
from pyhive import hive

from tests.conftest import (
    free_port,
    service_ready,
    start_server_process,
    start_service_process,
    stop_process,
    subprocess_env,
    tierlake_command,
    wait_for,
)
from tests.hive_metastore import StockMetastore
from tests.server.ingest.test_ingest_durability import TABLES, Writer, create_tables, expected_ids, lake_ids, query

pytestmark = pytest.mark.integration


def test_server_and_tiering_service_on_a_stock_hive_metastore(tmp_path):
    metastore = StockMetastore(free_port(), tmp_path / "hms").start()
    conf = [f"spark.hadoop.hive.metastore.uris={metastore.uri}", f"spark.sql.warehouse.dir={metastore.warehouse}",
            "tierlake.master=local[1]"]
    port = free_port()
    server = service = None
    try:
        server = start_server_process(tmp_path / "server", port, conf, workers=1)
        url = f"jdbc:hive2://127.0.0.1:{port}/default"
        # The service serves its own /metrics (tierlake.http.port; 0 picks a free port).
        service = start_service_process(tmp_path / "service", url, conf + ["tierlake.http.port=0"], workers=1)
        create_tables(port)
        (service_job,) = service_ready(service)
        # The lock-free path is only for a metastore the server runs itself.
        settings = dict(query(port, "CALL sys.server_info()"))
        assert settings.get("commit_protocol", "").startswith("metastore locks"), settings
        # A plain Iceberg table next to the stream tables: Spark's own INSERTs, four sessions at once
        # (the reproduction: with the compare-and-set on, 24 acknowledged, 14 rows).
        with hive.connect("127.0.0.1", port, username="tester") as conn:
            # Four writers at once retry more often than Iceberg's default 4 times.
            conn.cursor().execute("CREATE TABLE shop.plain (id BIGINT) USING iceberg "
                                  "TBLPROPERTIES ('commit.retry.num-retries'='30')")
        plain_errors: list[Exception] = []

        def plain_writer(n: int) -> None:
            try:
                with hive.connect("127.0.0.1", port, username="tester") as conn:
                    cursor = conn.cursor()
                    for i in range(6):
                        cursor.execute(f"INSERT INTO shop.plain VALUES ({n * 100 + i})")
            except Exception as e:  # noqa: BLE001 - reported below
                plain_errors.append(e)

        plain = [threading.Thread(target=plain_writer, args=(n,)) for n in range(4)]
        writers = [Writer(port, table, n) for n, table in enumerate(list(TABLES) * 3)]
        for w in [*writers, *plain]:
            w.start()
        deadline = time.monotonic() + 120
        while sum(len(w.acked) for w in writers) < 150 and time.monotonic() < deadline:
            time.sleep(0.2)
        for w in writers:
            w.stop.set()
            w.join(timeout=120)
        for t in plain:
            t.join(timeout=300)
        assert not plain_errors, plain_errors
        assert sorted(r[0] for r in query(port, "SELECT id FROM shop.plain")) == sorted(
            n * 100 + i for n in range(4) for i in range(6)), "an acknowledged INSERT into a plain table is missing"
        assert all(not w.unknown for w in writers), "a gateway write failed"
        for table in TABLES:
            ids = sorted(r[0] for r in query(port, f"SELECT id FROM {table}"))
            assert ids == expected_ids(writers, table), f"{table}: an acknowledged commit is missing"
            snapshots = query(port, f"SELECT count(*) FROM {table}.snapshots")[0][0]
            assert snapshots <= sum(len(w.acked) for w in writers if w.table == table) + 1
        lake = lake_ids(port, writers, timeout=180)
        for table in TABLES:
            assert lake[table] == expected_ids(writers, table), f"{table}: not tiered exactly once"
        # The server's job and the service's both tiered (which takes a table first is the scheduler's
        # choice: on a loaded machine the service may come to its first round later).
        # A finished one of each: a round that failed (a login refused under load, say) is retried later.
        wait_for(lambda: len({r[0] for r in query(port, "SELECT DISTINCT job_id FROM sys.tiering_rounds "
                                                        "WHERE outcome IN ('finished', 'force_finished')")}) == 2,
                 300, "finished rounds of both tiering jobs")
        # Its rows tiered, per table, in the service's own metrics.
        metrics_url = re.search(r"\(metrics: (\S+)\)$", service.ready_line).group(1)
        rows = {(db, t): n for db, t, n in query(
            port, f"SELECT database_name, table_name, sum(rows) FROM sys.tiering_rounds WHERE job_id = '{service_job}' "
            "AND outcome IN ('finished', 'force_finished') GROUP BY database_name, table_name")}
        with urllib.request.urlopen(metrics_url, timeout=30) as response:
            exposition = response.read().decode()
        scraped = {(m.group(1), m.group(2)): float(m.group(3)) for m in re.finditer(
            r'^tierlake_round_rows_total\{database="([^"]+)",table="([^"]+)"\} (\S+)$', exposition, re.M)}
        assert rows and all(scraped.get(key) == float(n) for key, n in rows.items() if n), (rows, scraped)
        assert re.search(r'^tierlake_round_duration_seconds_count\{database="[^"]+",table="[^"]+"\} [1-9]',
                         exposition, re.M), exposition[:2000]
    finally:
        for proc in (service, server):
            if proc is not None:
                stop_process(proc)
        metastore.stop()


def test_a_metastore_service_without_lock_tables_is_refused_at_start(tmp_path):
    """A metastore whose schema DataNucleus made (no HIVE_LOCKS …): the server hung forever at its first
    migration, Iceberg retrying the lock; now it stops at once and says what to create."""
    metastore = StockMetastore(free_port(), tmp_path / "hms", lock_tables=False).start()
    try:
        done = subprocess.run(
            tierlake_command() + ["server", "--home", str(tmp_path / "server"), "--port", str(free_port()),
                                  "--workers", "0",
                                  "--conf", f"spark.hadoop.hive.metastore.uris={metastore.uri}",
                                  "--conf", f"spark.sql.warehouse.dir={metastore.warehouse}",
                                  "--conf", "tierlake.master=local[1]"],
            capture_output=True, text=True, env=subprocess_env(), timeout=600)
    finally:
        metastore.stop()
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert f"the Hive metastore service {metastore.uri} cannot take locks" in done.stderr, done.stderr[-3000:]
    assert "schematool" in done.stderr and "HIVE_LOCKS" in done.stderr, done.stderr[-3000:]
    log = tmp_path / "server" / "logs" / "tierlake.log"
    assert not log.exists() or "applying migration" not in log.read_text()
