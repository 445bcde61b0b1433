"""Headless Chromium for the page tests: Debian's ``chromium`` and
``chromium-driver`` (installed by .ci/system-deps) driven by selenium; no
browser is downloaded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def chromium(width: int = 1400, height: int = 900):
    """A headless Chromium session (the caller quits it); skips, saying why, without the packages."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/system-deps installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def screenshot(driver, path: Path, docs_copy: Path, min_bytes: int) -> None:
    """Save the page to ``path`` (it must hold a real picture); with
    ``TIERLAKE_UPDATE_SCREENSHOTS=1`` also to ``docs_copy`` under docs/."""
    driver.save_screenshot(str(path))
    assert path.stat().st_size > min_bytes
    if os.environ.get("TIERLAKE_UPDATE_SCREENSHOTS"):
        docs_copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, docs_copy)
