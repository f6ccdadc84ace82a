"""The browser fixture itself, before any console: Debian's chromium loads a page from a loopback
http.server, runs its script, submits a form and leaves a full-page screenshot."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.console.browser import shot

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head><title>smoke</title><script src="page.js" defer></script></head>
<body><form id="f" action="done.html"><input name="q"><button>Go</button></form><p id="out"></p></body></html>"""
SCRIPT = 'document.getElementById("out").textContent = "script ran";'
DONE = "<!doctype html><title>done</title><p id='done'>submitted</p>"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "site"
    root.mkdir()
    for name, text in (("index.html", PAGE), ("page.js", SCRIPT), ("done.html", DONE)):
        (root / name).write_text(text)
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_chromium_loads_runs_submits_and_shoots(browser_context: BrowserContext, site: str, tmp_path: Path) -> None:
    page = browser_context.new_page()
    page.goto(site + "/index.html")
    expect(page.locator("#out")).to_have_text("script ran")
    page.fill("input[name=q]", "hello")
    page.get_by_role("button", name="Go").click()
    page.wait_for_url("**/done.html?q=hello")
    expect(page.locator("#done")).to_have_text("submitted")
    path = shot(page, tmp_path, "done")
    assert path == tmp_path / "screenshots" / "done.png"
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
