from dataclasses import dataclass

import pytest

from tierlake.server.exceptions import InvalidArgumentError, ProcedureFailedError, UnknownProcedureError
from tierlake.server.sqlapi.registry import Context, Registry
from tierlake.server.sqlapi.types import SqlMap, SqlStruct


@dataclass
class Entry:
    table_id: int
    tiering_epoch: int
    error_message: str | None = None


@pytest.fixture
def reg():
    r = Registry()

    @r.procedure(returns=[("table", "string"), ("n", "bigint")])
    def enable_tiering(ctx, table: str, freshness: str = "1 min", n: int = 1):
        """Register a table.

        Args:
          table: the table, db.name
          freshness: how fresh the lake must be
          n: a number
        """
        return [(table, n)]

    @r.procedure(returns=[("count", "bigint")])
    def heartbeat(ctx, job_id: str, entries: list[Entry] = (), snapshots: dict[int, int] | None = None):
        """Heartbeat.

        Args:
          job_id: the job
          entries: tables
          snapshots: bucket to snapshot
        """
        return [{"count": len(entries)}]

    @r.procedure(returns=[("x", "string")])
    def boom(ctx):
        """Always fails."""
        raise RuntimeError("kaput")

    return r


def test_signature_shows_sql_types(reg):
    assert reg.get("enable_tiering").signature() == (
        "sys.enable_tiering(table STRING, freshness STRING = '1 min', n BIGINT = 1)"
    )
    assert reg.get("heartbeat").signature() == (
        "sys.heartbeat(job_id STRING, entries ARRAY<STRUCT<table_id: BIGINT, tiering_epoch: BIGINT, "
        "error_message: STRING>> = array(), snapshots MAP<BIGINT, BIGINT> = NULL)"
    )


def test_unknown_procedure_suggests_close_names(reg):
    with pytest.raises(UnknownProcedureError) as info:
        reg.get("enable_tierng")
    assert "sys.enable_tierng" in info.value.message
    assert "did you mean sys.enable_tiering" in info.value.message
    with pytest.raises(UnknownProcedureError) as info:
        reg.get("zzzz")
    assert "sys.procedures" in info.value.message


def test_binding_by_position_and_name(reg):
    proc = reg.get("sys.enable_tiering")
    assert proc.bind(["db.t"], {"n": 3}) == {"table": "db.t", "freshness": "1 min", "n": 3}


@pytest.mark.parametrize(
    "args,kwargs,fragment",
    [
        ([], {}, "missing required parameter 'table'"),
        ([], {"tabel": "x"}, "no parameter 'tabel'; did you mean 'table'?"),
        (["x"], {"table": "y"}, "given both by position and by name"),
        (["a", "b", 1, 2], {}, "takes at most 3 argument(s), got 4"),
        ([1], {}, "parameter 'table': expected STRING, got BIGINT 1"),
        (["t"], {"n": "3"}, "parameter 'n': expected BIGINT, got STRING '3'"),
        (["t"], {"n": True}, "parameter 'n': expected BIGINT, got BOOLEAN True"),
        ([None], {}, "parameter 'table' must not be NULL"),
    ],
)
def test_binding_errors_name_the_parameter(reg, args, kwargs, fragment):
    with pytest.raises(InvalidArgumentError) as info:
        reg.get("enable_tiering").bind(args, kwargs)
    assert fragment in info.value.message


def test_structs_arrays_and_maps(reg):
    proc = reg.get("heartbeat")
    bound = proc.bind(
        ["j"],
        {"entries": [SqlStruct(table_id=1, tiering_epoch=2)], "snapshots": SqlMap({0: 5})},
    )
    assert bound["entries"] == [Entry(1, 2, None)]
    assert bound["snapshots"] == {0: 5}
    with pytest.raises(InvalidArgumentError, match=r"entries'\[0\]: missing field 'tiering_epoch'"):
        proc.bind(["j"], {"entries": [SqlStruct(table_id=1)]})
    with pytest.raises(InvalidArgumentError, match=r"unknown field 'epoch'"):
        proc.bind(["j"], {"entries": [SqlStruct(table_id=1, tiering_epoch=1, epoch=2)]})
    with pytest.raises(InvalidArgumentError, match=r"expected MAP<BIGINT, BIGINT>, got named_struct"):
        proc.bind(["j"], {"snapshots": SqlStruct(a=1)})


def test_invoke_normalises_rows_and_wraps_failures(reg):
    ctx = Context(spark=None)
    assert reg.get("heartbeat").invoke(ctx, ["j"], {}) == [(0,)]
    with pytest.raises(ProcedureFailedError, match="sys.boom failed: RuntimeError: kaput"):
        reg.get("boom").invoke(ctx, [], {})


def test_undocumented_procedures_cannot_register():
    r = Registry()

    def nodoc(ctx):
        return []

    with pytest.raises(ValueError, match="no docstring"):
        r.register(nodoc, returns=[("x", "string")])

    def undocumented_param(ctx, table: str):
        """Does things."""

    with pytest.raises(ValueError, match="parameter table is not documented"):
        r.register(undocumented_param, returns=[("x", "string")])


def test_every_builtin_procedure_is_documented():
    from tierlake.procedures import load_builtins

    reg = load_builtins()
    assert len(reg) >= 1
    for proc in reg:
        assert proc.description, proc.name
        assert all(p.description for p in proc.params), proc.name
        assert proc.returns, proc.name


def test_the_extension_example_of_the_docs_registers_and_runs(tmp_path, monkeypatch):
    """docs/procedures.md's extension module, as written, loaded through tierlake.extensions."""
    import re
    import sys
    from pathlib import Path

    from tierlake.server.app import load_extensions
    from tierlake.server.config.config import Config
    from tierlake.server.sqlapi import registry as shared

    text = (Path(__file__).resolve().parents[3] / "docs" / "procedures.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "myco_procs.py").write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = Config.load(home=tmp_path / "home", conf={"tierlake.extensions": "myco_procs"})
    try:
        assert load_extensions(config) == ["myco_procs"]
        hello = shared.default.get("hello")
        assert hello.signature() == "sys.hello(name STRING = 'world')"
        assert hello.invoke(None, [], {"name": "docs"}) == [("hello docs",)]
    finally:
        shared.default.unregister("hello")
        monkeypatch.delitem(sys.modules, "myco_procs", raising=False)
