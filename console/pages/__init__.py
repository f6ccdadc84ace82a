"""The console's page groups, one router each; `console.install` includes them in this order."""

from __future__ import annotations

from fastapi import APIRouter

from console.pages import (
    capacity,
    catalog,
    endpoint_history,
    endpoints,
    events,
    keys,
    models,
    nodes,
    people,
    secrets,
    signin,
    usage,
    workflows,
)

PAGES: tuple[APIRouter, ...] = (signin.router, catalog.router, workflows.router, endpoints.router,
                                endpoint_history.router, nodes.router, capacity.router, models.router, keys.router,
                                secrets.router, people.router, events.router, usage.router)
