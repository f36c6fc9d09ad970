"""Shared set-up of the browser tests: Playwright driving Debian's Chromium against ``live_server``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; the ORM calls made here while it runs are
# still plain synchronous calls, so Django's async-safety guard would refuse them for no reason.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps trying hosts this closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture
def browser_page():
    """A fresh Chromium page (laptop-sized); skips with the reason when Chromium is not installed."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (`make browser`) to run the browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(10_000)
        yield page
        browser.close()
