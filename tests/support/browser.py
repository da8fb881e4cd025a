"""A real headless Chromium for the dashboard's tests: Debian's ``chromium`` driven through its
``chromium-driver`` by Selenium (no browser download: the Makefile's ``apt`` target installs both).

``browser_missing()`` says why there is none (the tests skip with it outside CI; in CI, where
``make test`` installed the packages, a missing browser fails instead of skipping).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")


def severe_console(driver: Any) -> list[str]:
    """The page's console errors so far (a script error, a refused CSP rule, a failed load)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def browser_missing() -> str | None:
    """Why no browser can be driven here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path, package in ((CHROMIUM, "chromium"), (DRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is missing: apt-get install {package} (make apt)"
    return None


@contextmanager
def chromium(width: int = 1360, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, quit and its profile removed on every exit path."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="pion-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors (CSP) for the tests
    driver = None
    try:
        driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
