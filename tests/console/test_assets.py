"""The console's assets: the committed htmx is byte for byte the registry package mk/console.mk names, and
the API serves every asset the pages reference, with no URL outside Berth in any template."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx

from console import STATIC
from console.render import TEMPLATES
from server.context import ServerContext
from tests.console.app_support import browser, console_context

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_htmx_is_the_registry_package() -> None:
    pinned = re.search(r"^HTMX_SHA256 := ([0-9a-f]{64})$", (REPO / "mk/console.mk").read_text(), re.M)
    assert pinned, "mk/console.mk pins htmx's digest"
    assert hashlib.sha256((STATIC / "htmx.min.js").read_bytes()).hexdigest() == pinned.group(1)


def test_no_template_reaches_outside_berth() -> None:
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        assert not re.search(r"""(src|href|action)=["']?(https?:)?//""", text), template.name
        assert "<script>" not in text and " style=" not in text and "hx-on" not in text, template.name  # the CSP


async def test_the_api_serves_the_assets(tmp_path: Path) -> None:
    context: ServerContext = console_context(tmp_path / "state")
    async with browser(context) as client:
        for name, kind in (("htmx.min.js", "javascript"), ("console.js", "javascript"), ("charts.js", "javascript"),
                           ("console.css", "css")):
            answer: httpx.Response = await client.get(f"/ui/static/{name}")
            assert answer.status_code == 200 and kind in answer.headers["content-type"], name
        assert (await client.get("/ui/static/../app.py")).status_code == 404
