"""``sys.lake_tiering_health`` as a file: a view template rendered with the server's settings, plain Spark SQL
(no Python UDF), documented like every sys view."""

from __future__ import annotations

from pathlib import Path

import sqlglot
from sqlglot import exp

from tierlake import sql
from tierlake.server.config.config import Config
from tierlake.server.state import migrations

ROOT = Path(__file__).resolve().parents[3]


def test_the_quiet_threshold_is_half_the_heartbeat_timeout():
    assert migrations.view_params(Config.load(conf={"tierlake.tiering.heartbeat-timeout": "8 s"})) == {
        "silent_after_seconds": 4}
    text = sql.render("views/lake_tiering_health.sql.j2", silent_after_seconds=4)
    assert "heartbeat_age_seconds >= 4 THEN" in text


def test_every_view_template_renders_to_plain_sql_and_is_documented():
    templates = sql.files("views", ".sql.j2")
    assert [p.name for p in templates] == ["lake_tiering_health.sql.j2"]
    procedures = (ROOT / "docs" / "procedures.md").read_text()
    for path in templates:
        text = sql.render(f"views/{path.name}", **migrations.view_params())
        for statement in sql.split_statements(text):
            tree = sqlglot.parse_one(statement, read="spark")
            assert not [f.name for f in tree.find_all(exp.Anonymous)], path.name
        assert f"## sys.{path.name.removesuffix('.sql.j2')}" in procedures
