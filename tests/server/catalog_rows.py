"""A workflow's rows in the store as a start writes them (its rendered definition, its endpoint with the pool
facts), without Temporal: for the tests of what the API derives from them."""

from __future__ import annotations

from typing import Any

from berth.security import Identity
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from server.context import ServerContext
from server.submission import new_rows


def start_rows(context: ServerContext, entry_name: str, values: dict[str, Any], who: Identity) -> str:
    """Store the rows of a start of catalog entry `entry_name` with `values` by `who`; its endpoint id."""
    entry = find_entry(entry_name)
    definition = render(entry, resolve_values(entry, values))
    row, endpoint = new_rows(entry, definition, who)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    return endpoint.id
