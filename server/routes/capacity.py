"""Capacity route: free and total GPUs per node, per GPU model and in total, and which catalog entries would fit
right now with their default values. Any signed-in caller: capacity is not secret on a shared cluster, so a user
sees the administrator's figures; only other users' copy IDs are hidden, as in `node list`."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import Capacity
from berth.contracts.policies import Policy
from berth.security import Identity
from catalog.entry import Entry, load_catalog
from server import capacity_figures
from server.access import allocation_labels
from server.capacity import default_demand
from server.context import Context, ServerContext
from server.guards import Caller
from server.policy_check import subject_of
from server.policy_rules import entry_allowed
from server.store.policies import Policies

router = APIRouter()


@router.get("/v1/capacity")
async def capacity(context: Context, who: Caller) -> Capacity:
    """What the cluster's GPUs do now, and whether each catalog entry the caller may start would fit now."""
    return await run_in_threadpool(_capacity, context, who)


def startable_entries(who: Identity, policies: list[Policy]) -> list[Entry]:
    """The catalog entries `who` may start: those every allow-list binding them names (docs/policies.md), so the
    fits shown are of what they may start. Hours and quotas aside: they say when and how much, not what."""
    subject = subject_of(who)
    return [entry for entry in load_catalog().values() if entry_allowed(policies, subject, entry.name)]


def _capacity(context: ServerContext, who: Identity) -> Capacity:
    """Blocking: it reads the store and renders the entries' templates."""
    snapshot = context.store.placements.capacity_snapshot()
    placements = context.store.placements
    entries = startable_entries(who, Policies(context.store).all())
    demands = [demand for demand in map(default_demand, entries) if demand is not None]
    fits = [capacity_figures.entry_fit(demand, snapshot.views, context.settings.max_nodes_per_copy, placements.policy)
            for demand in demands]
    label = allocation_labels(context.store, who)
    return capacity_figures.capacity(snapshot.views, snapshot.holders, snapshot.serving, label, fits)
