"""The web console: server-rendered pages at /ui over the REST API, as the signed-in user.

Every page handler calls the API through `berth.api_client.ApiClient` with the user's own token (in-process,
console/bridge.py), so what a page shows and may change is exactly what the API's scope rules allow: the
console holds no credential and adds no authority of its own. Pages are Jinja2 templates; htmx (vendored,
mk/console.mk) swaps the live parts in place. Nothing is fetched from outside Berth."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Mount the console on the control plane's app: its pages and its static assets."""
    from console.pages import PAGES

    for router in PAGES:
        app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="console-static")
