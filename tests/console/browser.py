"""The real browser of the console's tests: Debian's chromium driven by Playwright's sync API (never a
Playwright browser download: the machines here have no internet), and full-page screenshots kept as the
test's artifacts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

# A click, a navigation or a selector gives up after this many milliseconds (two busy cores), and a wait on
# the stack itself (a simulated copy turning ready) after WAIT_MS: far below the module's budget either way.
ACTION_MS = 15_000
WAIT_MS = 90_000


def chromium_path() -> str:
    """The system chromium (`make chromium`); BERTH_CHROMIUM names another executable."""
    path = os.environ.get("BERTH_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError("Debian's chromium is needed for the console's browser tests: run `make chromium`")
    return path


@contextmanager
def launched_chromium() -> Iterator[Browser]:
    """A headless chromium for as long as the block runs.

    The sync API marks its own event loop as the thread's running loop between calls, so an async test
    (pytest-asyncio's session loop) cannot run while this block is open: callers hold it for one module of
    plain test functions at most, never for the session.
    """
    # Chromium's sandbox refuses to start as root; anyone else keeps it.
    sandbox = os.geteuid() != 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             chromium_sandbox=sandbox)
        try:
            yield browser
        finally:
            browser.close()


def shot(page: Page, tmp_path: Path, name: str) -> Path:
    """A full-page PNG of what the page shows now, as `<tmp_path>/screenshots/<name>.png`."""
    path = tmp_path / "screenshots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    return path


def console_errors(page: Page) -> list[str]:
    """What the page's JavaScript reports from now on: uncaught errors and console errors, a refused
    Content-Security-Policy among them. A 4xx/5xx answer's own "Failed to load resource" line is left out:
    the tests check statuses themselves, and some pages are refusals on purpose."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error"
            and not message.text.startswith("Failed to load resource") else None)
    return errors
