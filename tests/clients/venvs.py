"""Virtual environments for the client distribution next to other tools' pins.

Each is made once under ``.venv-clients/<name>`` (git-ignored) from PyPI, and
remade when its requirements change; the client itself is reinstalled from
``clients/python`` on every run (not editable: what ``pip install`` of the
distribution gives), so the tests always exercise the current code.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
VENVS = ROOT / ".venv-clients"


def _run(args: list[str], what: str, timeout: float) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def client_venv(name: str, requirements: list[str], timeout: float = 1500) -> Path:
    """The venv ``name`` with ``requirements`` and the client installed; its ``bin``."""
    venv = VENVS / name
    stamp = venv / ".requirements"
    wanted = "\n".join(requirements) + "\n"
    if not stamp.exists() or stamp.read_text() != wanted:
        started = time.monotonic()
        _run([sys.executable, "-m", "venv", "--clear", str(venv)], f"python -m venv {venv}", 120)
        _run([str(venv / "bin" / "pip"), "install", "-q", *requirements, str(CLIENT)],
             f"pip install into {venv}", timeout)
        stamp.write_text(wanted)
        print(f"{venv}: made in {time.monotonic() - started:.0f} s")
    _run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--force-reinstall", str(CLIENT)],
         f"pip install {CLIENT} into {venv}", 300)
    return venv / "bin"

