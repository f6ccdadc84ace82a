"""Catalog pages: the entries with category/tag filters, one entry with its parameters and memory table,
and the start form generated from the entry's typed parameters. The browser checks what the field types
allow (number bounds, patterns, choices); the API checks everything and its words are shown beside the form
with every value kept."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import EntryDetail, ParameterView
from berth.errors import BerthError
from console.pages.form_values import form_text
from console.render import page, redirect
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
# The first parameters (the catalog lists the ones a newcomer sets first) stay in view; the rest fold away.
FIRST_SHOWN = 10
NAME_FIELD = "workflow-name"  # parameters are CamelCase words: a hyphenated field never collides with one


@router.get("/catalog")
async def catalog(request: Request, session: Signed, category: str = "", tag: str = "") -> Response:
    everything = await session.api.catalog()
    shown = await session.api.catalog(category or None, tag or None) if (category or tag) else everything
    return page(request, session, "catalog.html", entries=shown, category=category, tag=tag,
                categories=sorted({e.category for e in everything}),
                tags=sorted({t for e in everything for t in e.tags}))


def default_text(parameter: ParameterView) -> str:
    """A parameter's default as the form shows it (and as a field left alone is recognised)."""
    value = parameter.default
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def chosen_values(detail: EntryDetail, form: dict[str, str]) -> dict[str, Any]:
    """What the user changed: a field equal to its default, or empty, is left to the catalog's default —
    as `--values` sends only what is named."""
    chosen: dict[str, Any] = {}
    for parameter in detail.parameters:
        text = form.get(parameter.name, "").strip()
        if text and text != default_text(parameter):
            chosen[parameter.name] = text
    return chosen


@router.get("/catalog/entry")
async def entry(request: Request, session: Signed, name: str) -> Response:
    detail = await session.api.catalog_entry(name)
    return page(request, session, "entry.html", entry=detail, values={}, error=None, default_text=default_text,
                name_field=NAME_FIELD, first_shown=FIRST_SHOWN)


@router.post("/catalog/entry", dependencies=[CsrfChecked])
async def start(request: Request, session: Signed, name: str) -> Response:
    detail = await session.api.catalog_entry(name)
    form = await form_text(request)
    workflow_name = form.get(NAME_FIELD, "").strip() or None
    try:
        started = await session.api.start_workflow(detail.name, chosen_values(detail, form), workflow_name)
    except BerthError as error:
        # The same page, every value as typed, and the API's one line: nothing the user entered is lost.
        return page(request, session, "entry.html", error.http_status, entry=detail, values=form, error=str(error),
                    default_text=default_text, name_field=NAME_FIELD, first_shown=FIRST_SHOWN)
    return redirect(f"/ui/workflows/{started.id}")
