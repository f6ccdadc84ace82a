"""Catalog routes: list the entries (by category or tag) and show one with its parameters and memory table."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import EntryDetail, EntrySummary
from catalog.entry import find_entry, load_catalog
from server.guards import Caller
from server.views import entry_detail, entry_summary

router = APIRouter()


def _listed(category: str | None, tag: str | None) -> list[dict[str, Any]]:
    entries = list(load_catalog().values())
    if category:
        entries = [e for e in entries if e.category.casefold() == category.casefold()]
    if tag:
        entries = [e for e in entries if tag.casefold() in (t.casefold() for t in e.tags)]
    return [entry_summary(e) for e in entries]


@router.get("/v1/catalog", response_model=list[EntrySummary])
async def catalog(_who: Caller, category: str | None = None, tag: str | None = None) -> list[dict[str, Any]]:
    # The first listing reads every entry.yaml from disk: off the event loop.
    return await run_in_threadpool(_listed, category, tag)


@router.get("/v1/catalog/entry", response_model=EntryDetail, response_model_exclude_unset=True)
async def catalog_entry(name: str, _who: Caller) -> dict[str, Any]:
    return await run_in_threadpool(lambda: entry_detail(find_entry(name)))
