"""Golden render tests of the tiering templates (dbt-spark style, no Spark):
each case renders a template and compares the normalised SQL with
tests/fixtures/templates/<case>.sql. Regenerate a fixture by deleting it and
running with TIERLAKE_REGEN=1."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import sqlglot

from tierlake import sql
from tierlake.server.catalog.spec import CHANGE_TYPE, CHANGE_TYPES, Column, TieredSpec, partition_sql

FIXTURES = Path(__file__).parents[1] / "fixtures" / "templates"
PK = TieredSpec.from_properties({"primary-key": "order_id", "bucket.num": "4", "sequence-by": "ts"})

CASES = {
    "create_stream_pk": ("templates/create_stream_table.sql.j2", dict(
        table=["shop", "orders"], columns=[Column("order_id", "BIGINT NOT NULL"), Column("ts", "TIMESTAMP")],
        spec=PK, change_type=CHANGE_TYPE, properties={"table.datalake.enabled": "true", "primary-key": "order_id"})),
    "create_stream_pk_not_null": ("templates/create_stream_table.sql.j2", dict(
        table=["shop", "orders"], columns=[Column("Region", "STRING COMMENT 'r'"), Column("order_id", "BIGINT"),
                                           Column("v", "STRING")],
        spec=TieredSpec.from_properties({"primary-key": "region, order_id"}), change_type=CHANGE_TYPE,
        properties={"table.datalake.enabled": "true", "primary-key": "region, order_id"})),
    "delete_older_than": ("templates/delete_older_than.sql.j2", dict(
        table=["sys", "tiering_round_log"], column="ended_at")),
    "count_null_keys": ("templates/count_null_keys.sql.j2", dict(table=["shop", "orders"], keys=["region", "id"])),
    "create_stream_log": ("templates/create_stream_table.sql.j2", dict(
        table=["shop", "we`ird"], columns=[Column("id", "BIGINT")], spec=TieredSpec(), change_type=CHANGE_TYPE,
        properties={"table.datalake.enabled": "true", "it's": "quoted"})),
    "create_lake_partitioned": ("templates/create_lake_table.sql.j2", dict(
        table=["shop_lake", "orders"], columns=[Column("order_id", "BIGINT"), Column("ts", "TIMESTAMP")], spec=PK,
        partition=[partition_sql("days(ts)"), partition_sql("bucket(4, order_id)")], stream="shop.orders")),
    "log_append": ("templates/tiering_log_append.sql.j2", dict(
        target=["shop_lake", "events", "branch_tierlake_1_2_ab"], delta="__tierlake_delta_x", columns=["id", "msg"])),
    "pk_merge_sequence_by": ("templates/tiering_pk_merge.sql.j2", dict(
        target=["shop_lake", "orders", "branch_tierlake_7_3_cd"], delta="__d", files="__f",
        columns=["order_id", "amount", "tags", "ts"], json_columns=["tags"], keys=["order_id"], sequence_by="ts",
        change_type=CHANGE_TYPE, change_types=CHANGE_TYPES, guard="tierlake: it's refused")),
    "pk_load_sequence_by": ("templates/tiering_pk_load.sql.j2", dict(
        delta="__d", files="__f", columns=["order_id", "amount", "tags", "ts"], json_columns=["tags"],
        keys=["order_id"], sequence_by="ts", change_type=CHANGE_TYPE, change_types=CHANGE_TYPES,
        guard="tierlake: it's refused")),
    "pk_merge_composite_key": ("templates/tiering_pk_merge.sql.j2", dict(
        target=["db_lake", "t", "branch_b"], delta="__d", files="__f", columns=["a", "b", "v"], json_columns=[],
        keys=["a", "b"], sequence_by=None, change_type=CHANGE_TYPE, change_types=CHANGE_TYPES, guard="refused")),
    "changelog_check_sequence_by": ("templates/changelog_check.sql.j2", dict(
        delta="__d", files="__f", columns=["order_id", "amount", "tags", "ts"], json_columns=["tags"],
        keys=["order_id"], sequence_by="ts", change_type=CHANGE_TYPE, change_types=CHANGE_TYPES, shown=5)),
    "changelog_check_composite_key": ("templates/changelog_check.sql.j2", dict(
        delta="__d", files="__f", columns=["a", "b", "v"], json_columns=[], keys=["a", "b"], sequence_by=None,
        change_type=CHANGE_TYPE, change_types=CHANGE_TYPES, shown=5)),
    "stream_files": ("templates/stream_files.sql.j2", dict(
        entries=["shop", "orders", "entries"], bucket_field="order_id_bucket", version=7123, snapshot_ids=None)),
    "stream_files_rewritten": ("templates/stream_files.sql.j2", dict(
        entries=["shop", "orders", "all_entries"], bucket_field="order_id_bucket", version=None,
        snapshot_ids=[7121, 7123])),
    "add_columns": ("templates/lake_add_columns.sql.j2", dict(
        table=["shop_lake", "orders"], columns=[Column("note", "STRING"), Column("n", "DECIMAL(10, 2)")])),
    "create_stream_staged": ("templates/create_stream_table.sql.j2", dict(
        table=["sys", "ctas_0123456789ab_stream"], columns=[Column("id", "BIGINT")], spec=TieredSpec(),
        change_type=CHANGE_TYPE, properties={"table.datalake.enabled": "true"},
        location="file:/w/shop.db/o'rders-0123456789ab")),
    "create_lake_staged": ("templates/create_lake_table.sql.j2", dict(
        table=["sys", "ctas_0123456789ab_lake"], columns=[Column("id", "BIGINT")], spec=TieredSpec(), partition=[],
        stream="shop.orders", location="file:/w/shop_lake.db/orders-0123456789ab")),
    "rename_table": ("templates/rename_table.sql.j2", dict(
        source=["sys", "ctas_0123456789ab_stream"], target=["shop", "or`ders"])),
    "fresh_view_log": ("templates/fresh_view.sql.j2", dict(
        view=["shop_fresh", "events"], lake=["shop_lake", "events"], stream=["shop", "events"],
        stream_after=["tierlake_inc", "shop", "events", "after_9001"],
        entries=["tierlake_inc", "shop", "events", "entries_after_9001"],
        columns=[Column("id", "bigint"), Column("note", "string")],
        stream_columns=["id", None], keys=[], sequence_by=None, change_type=CHANGE_TYPE,
        lake_snapshot=4242, position=17, comment="fresh view of shop.events")),
    "fresh_view_pk": ("templates/fresh_view.sql.j2", dict(
        view=["shop_fresh", "orders"], lake=["shop_lake", "orders"], stream=["shop", "orders"],
        stream_after=["tierlake_inc", "shop", "orders", "after_9001"],
        entries=["tierlake_inc", "shop", "orders", "entries_after_9001"],
        columns=[Column("order_id", "bigint"), Column("ts", "timestamp")],
        stream_columns=["order_id", "ts"], keys=["order_id"], sequence_by="ts", change_type=CHANGE_TYPE,
        lake_snapshot=4242, position=17, comment="fresh view of shop.orders", pin="5:17:4242")),
    # What the server renders: the pending changes as one relation (FreshMerge.java replaces it at planning).
    "fresh_view_log_merged": ("templates/fresh_view.sql.j2", dict(
        view=["shop_fresh", "events"], lake=["shop_lake", "events"], stream=["shop", "events"],
        stream_after=["tierlake_inc", "shop", "events", "after_9001"],
        entries=["tierlake_inc", "shop", "events", "entries_after_9001_at_17"],
        merged=["tierlake_inc", "shop", "events", "pending_after_9001_at_17"],
        columns=[Column("id", "bigint"), Column("note", "string")],
        stream_columns=["id", None], keys=[], sequence_by=None, change_type=CHANGE_TYPE,
        lake_snapshot=4242, position=17, comment="fresh view of shop.events", pin="5:17:4242")),
    "fresh_view_pk_merged": ("templates/fresh_view.sql.j2", dict(
        view=["shop_fresh", "orders"], lake=["shop_lake", "orders"], stream=["shop", "orders"],
        stream_after=["tierlake_inc", "shop", "orders", "after_9001"],
        entries=["tierlake_inc", "shop", "orders", "entries_after_9001_at_17"],
        merged=["tierlake_inc", "shop", "orders", "winners_after_9001_at_17_keys_1_seq_2_change_3"],
        columns=[Column("order_id", "bigint"), Column("ts", "timestamp")],
        stream_columns=["order_id", "ts"], keys=["order_id"], sequence_by="ts", change_type=CHANGE_TYPE,
        lake_keys=["order_id"], out_keys=["order_id"],
        lake_snapshot=4242, position=17, comment="fresh view of shop.orders", pin="5:17:4242")),
    # No snapshot at the position to read after (expired, or no tierlake_inc): every stream file is scanned.
    "fresh_view_log_full_scan": ("templates/fresh_view.sql.j2", dict(
        view=["shop_fresh", "events"], lake=["shop_lake", "events"], stream=["shop", "events"], stream_after=None,
        entries=["shop", "events", "entries"], columns=[Column("id", "bigint"), Column("note", "string")],
        stream_columns=["id", None], keys=[], sequence_by=None, change_type=CHANGE_TYPE,
        lake_snapshot=4242, position=17, comment="fresh view of shop.events")),
    "fresh_view_pk_full_scan": ("templates/fresh_view.sql.j2", dict(
        view=["shop_fresh", "orders"], lake=["shop_lake", "orders"], stream=["shop", "orders"], stream_after=None,
        entries=["shop", "orders", "entries"], columns=[Column("order_id", "bigint"), Column("ts", "timestamp")],
        stream_columns=["order_id", "ts"], keys=["order_id"], sequence_by="ts", change_type=CHANGE_TYPE,
        lake_snapshot=4242, position=17, comment="fresh view of shop.orders")),
    "fresh_view_pk_no_lake_snapshot": ("templates/fresh_view.sql.j2", dict(
        view=["db_fresh", "t"], lake=["db_lake", "t"], stream=["db", "t"], stream_after=None,
        entries=["db", "t", "entries"],
        columns=[Column("a", "int"), Column("b", "int"), Column("v", "string")], stream_columns=["a", "b", "v"],
        keys=["a", "b"], sequence_by=None, change_type=CHANGE_TYPE, lake_snapshot=None, position=0,
        comment="it's fresh")),
    "lake_diff_log": ("templates/lake_diff.sql.j2", dict(
        delta="__tierlake_validate_delta_x", lake="__tierlake_validate_lake_x", columns=["id", "tags", "msg"],
        json_columns=["tags"], keys=[])),
    "lake_diff_pk_sequence_by": ("templates/lake_diff.sql.j2", dict(
        delta="__d", files="__f", lake="__l", columns=["order_id", "amount", "tags", "ts"], json_columns=["tags"],
        keys=["order_id"], sequence_by="ts", change_type=CHANGE_TYPE, change_types=CHANGE_TYPES,
        guard="tierlake: it's refused")),
    "drop_view": ("templates/drop_view.sql.j2", dict(view=["shop_fresh", "or`ders"])),
    "drop_table_purge": ("templates/drop_table.sql.j2", dict(table=["sys", "ctas_0123456789ab_lake"], purge=True)),
    "read_table_at_snapshot": ("templates/read_table.sql.j2", dict(table=["shop", "a/b`c"], version=7123)),
    "read_table_now": ("templates/read_table.sql.j2", dict(table=["shop", "orders"], version=None)),
}


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("case", sorted(CASES))
def test_template_renders_the_golden_sql(case):
    template, context = CASES[case]
    rendered = normalise(sql.render(template, **context))
    fixture = FIXTURES / f"{case}.sql"
    if os.environ.get("TIERLAKE_REGEN") and not fixture.exists():
        fixture.write_text(rendered + "\n")
    assert rendered == fixture.read_text().strip()


@pytest.mark.parametrize("case", sorted(c for c in CASES if not c.startswith("call")))
def test_rendered_sql_parses(case):
    template, context = CASES[case]
    assert sqlglot.parse_one(sql.render_checked(template, **context), read="spark") is not None


# Names a template may use that are not in tierlake's reserved namespace: the user's own (the cases' columns,
# tables and views), the metadata tables' columns, and the changelog check's result columns (read by name,
# from relations holding reserved names only), and lake_diff's result columns (read by name).
_NOT_GENERATED = {"problem", "detail", "position", "rows", "total", "file_path", "sequence_number", "bucket",
                  "record_count", "file_size_in_bytes", "null_keys", "missing_rows", "extra_rows", "missing_first",
                  "missing_last", "extra_first", "extra_last"}


@pytest.mark.parametrize("case", sorted(c for c in CASES if not c.startswith("call")))
def test_every_generated_name_is_reserved(case):
    """Every alias a template makes up (tables, subqueries, CTEs, windows, helper columns) starts with
    ``__tierlake``, a prefix no user column may take (docs/tiering.md, "Reserved names")."""
    template, context = CASES[case]
    tree = sqlglot.parse_one(sql.render_checked(template, **context), read="spark")
    user = {str(c.name if isinstance(c, Column) else c).lower() for c in context.get("columns", [])}
    user |= {str(k).lower() for k in [*(context.get("keys") or []), *(context.get("out_names") or []),
                                      context.get("change_type") or ""]}
    made = {a.name for a in tree.find_all(sqlglot.exp.TableAlias) if a.name}
    made |= {a.alias for a in tree.find_all(sqlglot.exp.Alias)}
    made |= {w.alias for w in tree.find_all(sqlglot.exp.Window) if isinstance(w.alias, str) and w.alias}
    made |= {w.this.name for w in tree.find_all(sqlglot.exp.WindowSpec) if isinstance(w.this, sqlglot.exp.Identifier)}
    stray = sorted(n for n in made if not n.lower().startswith("__tierlake") and n.lower() not in user
                   and n.lower() not in _NOT_GENERATED)
    assert stray == [], f"{case}: generated names outside the reserved namespace: {stray}"


def test_identifiers_cannot_break_out():
    text = sql.render("templates/tiering_log_append.sql.j2", target=["d", "t` ; DROP TABLE x; --"],
                      delta="v", columns=["c"])
    assert "`t`` ; DROP TABLE x; --`" in text
    assert len(sqlglot.parse(text, read="spark")) == 1


def test_hostile_partition_transforms_are_refused():
    from tierlake.server.exceptions import InvalidArgumentError

    for bad in ["days(ts)); DROP TABLE x; --", "bucket(x, id)", "nosuch(ts)", "days(a, b)"]:
        with pytest.raises(InvalidArgumentError):
            partition_sql(bad)


# What ``|literal`` may render (sql/__init__.py says why): DDL values stored in a definition, and constants.
LITERAL_USES = {
    "create_stream_table.sql.j2": {"location", "key", "value"},
    "create_lake_table.sql.j2": {"location", "stream"},
    "fresh_view.sql.j2": {"comment"},
    "tiering_pk_winners.sql.j2": {"change_types", "guard"},
    "changelog_check.sql.j2": {"change_types"},
}


def test_literal_renders_only_what_sql_init_allows():
    found: dict[str, set[str]] = {}
    for path in sorted((Path(sql.SQL_DIR)).rglob("*.j2")):
        text = path.read_text()
        names = set(re.findall(r"\{\{-?\s*([\w.]+)\s*\|\s*literal\b", text))
        names |= set(re.findall(r"\{\{-?\s*([\w.]+)\s*\|\s*map\(\s*['\"]literal['\"]\s*\)", text))
        if names or re.search(r"literal\b", re.sub(r"\{#.*?#\}", "", text, flags=re.S)):
            found[path.name] = names
    assert found == LITERAL_USES, "a new |literal use: bind the value (:name) or say in sql/__init__.py why not"
