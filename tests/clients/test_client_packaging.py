"""The client distribution: one root package, ``tierlake_client``, with the
dashboard export, and no dependency a BI host does not already have."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from tests.clients.venvs import CLIENT

EXPORT = CLIENT / "tierlake_client" / "superset" / "dashboard"


def _wheel(tmp_path: Path) -> zipfile.ZipFile:
    # Built from a copy of the tracked files: setuptools reuses an in-tree
    # build/ (and its egg-info), which would hide a file the package data misses.
    src = tmp_path / "src"
    root = CLIENT.parents[1]
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "clients/python"],
                             cwd=root, capture_output=True, text=True, check=True).stdout
    for rel in tracked.splitlines():
        if (root / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, src / rel)
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(src / "clients" / "python")],
                   check=True, capture_output=True, text=True)
    (wheel,) = out.glob("tierlake_client-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_client_wheel_holds_its_root_and_the_whole_dashboard_export(tmp_path):
    wheel = _wheel(tmp_path)
    names = wheel.namelist()
    assert {n.split("/")[0] for n in names} == {"tierlake_client", next(n.split("/")[0] for n in names
                                                                        if ".dist-info/" in n)}
    shipped = {n.split("superset/dashboard/", 1)[1] for n in names if "superset/dashboard/" in n}
    on_disk = {p.relative_to(EXPORT).as_posix() for p in EXPORT.rglob("*.yaml")}
    assert shipped == on_disk and len(on_disk) >= 13
    meta = Parser().parsestr(wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
    requires = [r.split(";")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()
                for r in meta.get_all("Requires-Dist")]
    assert sorted(requires) == ["pure-sasl", "pyhive", "sqlalchemy", "sqlglot", "thrift", "thrift-sasl"]
    entry_points = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "tierlake = tierlake_client.sqlalchemy_dialect:TierlakeDialect" in entry_points
    assert "tierlake = tierlake_client.superset.engine_spec:TierlakeEngineSpec" in entry_points
    assert "tierlake-superset = tierlake_client.superset.dashboard:main" in entry_points


def test_the_server_depends_on_the_client_and_registers_no_second_dialect():
    cfg = (Path(__file__).resolve().parents[2] / "setup.cfg").read_text()
    assert "tierlake-client==" in cfg
    assert "sqlalchemy_dialect" not in cfg


def test_the_export_names_no_real_database_url():
    (database,) = (EXPORT / "databases").glob("*.yaml")
    text = database.read_text()
    assert "sqlalchemy_uri: tierlake://tierlake@127.0.0.1:10000/default" in text
    assert "password" not in text.lower()


def test_the_client_imports_nothing_of_the_server():
    import ast

    allowed_third_party = {"sqlalchemy", "pyhive", "thrift", "thrift_sasl", "sqlglot", "superset"}
    for path in (CLIENT / "tierlake_client").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                assert top == "tierlake_client" or top in allowed_third_party or top in sys.stdlib_module_names, \
                    f"{path.relative_to(CLIENT)} imports {name}"
