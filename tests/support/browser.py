"""A real headless Chromium for the console's tests: Debian's `chromium` (installed by `make
deps`) driven by Playwright through `executable_path`, so no browser is downloaded at test time.
A missing chromium fails the test loudly, never skips it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CANDIDATES = ("chromium", "chromium-browser")


def chromium_executable() -> str:
    if path := os.environ.get("COORD_TEST_CHROMIUM"):
        return path
    for name in CANDIDATES:
        if found := shutil.which(name):
            return found
    pytest.fail(
        "chromium is not installed: the console tests drive Debian's chromium "
        "(`make deps` installs it: apt-get install chromium)",
        pytrace=False,
    )


@contextmanager
def chromium(**context: Any) -> Iterator[Any]:
    """A browser context (viewport 1280x900 unless told otherwise)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium_executable(),
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900}, **context)
            yield ctx
        finally:
            browser.close()
