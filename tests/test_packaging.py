"""The distribution installs one root package, ``tierlake``, and nothing else."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGE_DIRS = ("server", "procedures", "udfs", "sql")


def _declared_packages() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {line.strip() for line in cfg["options"]["packages"].splitlines() if line.strip()}


def test_every_package_folder_is_declared_under_tierlake():
    on_disk = {"tierlake"} | {
        "tierlake." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in SUBPACKAGE_DIRS
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert _declared_packages() == on_disk


def test_the_wheel_holds_only_the_tierlake_root(tmp_path):
    # Build from a copy of the tracked files: the check must see what a
    # clean clone ships, and the build must not litter the work tree.
    src = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in tracked.splitlines():
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    (wheel,) = out.glob("tierlake-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names}
    assert top_level == {"tierlake", next(t for t in top_level if t.endswith(".dist-info"))}
    assert "tierlake/server/cli.py" in names
    # Every feature's JVM half ships, to be compiled on first start (runtime/javaext.py).
    java = {"tierlake/" + p.relative_to(ROOT).as_posix() for p in (ROOT / "server").rglob("java/*.java")}
    assert len(java) > 15 and java <= set(names), sorted(java - set(names))
    assert "tierlake/sql/templates/tiering_pk_merge.sql.j2" in names
    assert any(n.startswith("tierlake/sql/schema/") and n.endswith(".sql") for n in names)
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "tierlake = tierlake.server.cli:main" in entry_points
