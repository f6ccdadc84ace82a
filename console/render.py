"""Pages and fragments rendered from console/templates (autoescaped Jinja2), with the headers every console
answer carries: a Content-Security-Policy that admits only Berth's own scripts and styles, no framing, no
caching of pages that show a user's data, and no referrer beyond this origin (a URL may carry an ID)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from console.session import CSRF_COOKIE, Session, set_cookies

TEMPLATES = Path(__file__).parent / "templates"
_ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]),
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)

HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
                                "object-src 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send `Origin: null` on posts
    "Cache-Control": "no-store",
}


def when(epoch: float | datetime | None) -> str:
    """A time as the console shows it: UTC, to the second (the browser's zone is not known server-side)."""
    if epoch is None:
        return "—"
    moment = epoch if isinstance(epoch, datetime) else datetime.fromtimestamp(epoch, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def number(value: float | int) -> str:
    """A bound as the catalog wrote it: 256, not 256.0."""
    return str(int(value)) if float(value).is_integer() else str(value)


_ENV.filters["when"] = when
_ENV.filters["number"] = number


def html(request: Request, template: str, status_code: int = 200, session: Session | None = None,
         **context: Any) -> HTMLResponse:
    """A whole page (or, for a template under fragments/, a part htmx swaps in)."""
    body = _ENV.get_template(template).render(
        request_path=request.url.path, user=session.user if session else None,
        csrf=session.csrf if session else context.pop("csrf", ""), **context)
    response = HTMLResponse(body, status_code=status_code, headers=HEADERS)
    if session is not None and request.cookies.get(CSRF_COOKIE) != session.csrf:
        set_cookies(request, response, session.token, session.csrf)
    return response


def page(request: Request, session: Session, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return html(request, template, status_code, session, **context)


def redirect(to: str) -> RedirectResponse:
    """After a successful POST: 303 to the page that shows its result (a reload never re-posts)."""
    if not to.startswith("/ui"):  # never a redirect off the console: `to` may carry a user's value
        to = "/ui"
    return RedirectResponse(to, status_code=303, headers=HEADERS)
