"""Fixtures of the console's browser tests: `chromium`, one headless browser per module (see browser.py for
why not per session), and `browser_context`, a fresh one (fresh cookies) per test. Named apart from the
in-process page tests' `context` (a ServerContext) and app_support's `browser` (an httpx client)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext

from tests.console.browser import ACTION_MS, launched_chromium


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with launched_chromium() as running:
        yield running


@pytest.fixture
def browser_context(chromium: Browser) -> Iterator[BrowserContext]:
    """A signed-out browser at 1280×800 that trusts the stack's private CA (https with --tls)."""
    fresh = chromium.new_context(viewport={"width": 1280, "height": 800}, ignore_https_errors=True)
    fresh.set_default_timeout(ACTION_MS)
    try:
        yield fresh
    finally:
        fresh.close()
