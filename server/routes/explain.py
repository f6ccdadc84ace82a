"""Explain routes (docs/explain.md): where the scheduler placed a workflow's copies and why, or what a copy it has not
placed meets now; which copies behind an endpoint get its requests; every recorded end of a copy. Whoever may describe
the workflow may ask of it (server/access.py), whoever may see the endpoint of its routing; other users' copies holding
a node's GPUs are not named, as in `node list`. The scaling answer stays at `/v1/workflows/{id}/scaling`
(server/routes/scaling.py): `berth explain scaling` reads it there."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from berth.contracts import Placement, PoolFacts
from berth.contracts.explain import CopyPlacement, FailureExplanation, PlacementExplanation, RoutingExplanation
from berth.errors import BerthError, NotFoundError, UserInputError
from berth.kinds import facts
from berth.processes import tail
from berth.security import Identity
from catalog.definition import WorkflowDefinition
from catalog.entry import load_catalog
from gateway.edge.routing import DEFAULT_POLICY
from server import explain_failure, explain_placement, explain_routing, placement_advice
from server.access import WorkflowAccess, allocation_labels, workflow_access
from server.capacity import replica_demand
from server.context import Context, ServerContext
from server.guards import Caller, VisibleEndpoint
from server.pool_query import pool_status
from server.store.copy_outcomes import traffic_of
from server.store.copy_sites import copy_sites
from server.store.placement import CapacitySnapshot
from server.store.policies import Policies
from server.store.tables import EndpointRow

router = APIRouter()
QUERY_TIMEOUT = timedelta(seconds=5)  # as `workflow describe` waits for the pool's status

COPY_MARK = ".copy-"  # a copy's ID is its workflow's and its index (workflows/placement.py new_copy)


@dataclass(frozen=True)
class Target:
    """What `{target_id}` names: a workflow the caller may describe, and one of its copies or all of them."""

    access: WorkflowAccess
    copy_id: str | None


def find_target(context: ServerContext, target_id: str, who: Identity) -> Target:
    """A workflow ID, else a copy ID of a workflow the caller may describe; anything else is not there (404)."""
    try:
        return Target(workflow_access(context.store, target_id, who), None)
    except NotFoundError:
        workflow_id, mark, index = target_id.rpartition(COPY_MARK)
        if not (mark and index.isdigit()):
            raise
    return Target(workflow_access(context.store, workflow_id, who), target_id)


async def explained_target(target_id: str, context: Context, who: Caller) -> Target:
    return await run_in_threadpool(find_target, context, target_id, who)


ExplainedTarget = Annotated[Target, Depends(explained_target)]


@router.get("/v1/explain/placement/{target_id}")
async def explain_placement_of(target: ExplainedTarget, context: Context) -> PlacementExplanation:
    """The chosen nodes of each copy with their score terms, the first filter that turned every other node away,
    and for a copy not placed now the smallest changes that would place it."""
    return await run_in_threadpool(_placement, context, target)


def _held_by(snapshot: CapacitySnapshot, context: ServerContext, who: Identity) -> dict[str, list[str]]:
    label = allocation_labels(context.store, who)
    holders: dict[str, set[str]] = defaultdict(set)
    for (node_id, _gpu), copy_id in snapshot.holders.items():
        shown = label(copy_id)
        if shown is not None:
            holders[node_id].add(shown)
    return {node_id: sorted(copies) for node_id, copies in holders.items()}


def _placement(context: ServerContext, target: Target) -> PlacementExplanation:
    """Blocking: it reads the store and the catalog."""
    row = target.access.row
    definition = WorkflowDefinition.model_validate(context.store.workflow_definition(row))
    replica = definition.replica
    if replica is None:
        raise UserInputError(f"{row.id} runs a service, not model copies: the scheduler places none of it.")
    volume = definition.weights.volume if definition.weights else None
    demand = dataclasses.replace(replica_demand(replica), prefer_volume=volume)
    placements = context.store.placements
    snapshot = placements.capacity_snapshot()
    held = {r.copy_id: [(rank.node_id, rank.gpus) for rank in Placement.model_validate(r.placement).ranks]
            for r in placements.reservations(row.id)}
    max_nodes = context.settings.max_nodes_per_copy
    blocked = placement_advice.Blocked(demand=demand, replica=replica, entry=load_catalog().get(row.entry),
                                       views=snapshot.views, policy=placements.policy, max_nodes_per_copy=max_nodes,
                                       holders=_held_by(snapshot, context, target.access.who))

    refusal = Policies(context.store).placement_refusal(row.id, demand.nodes * demand.gpus_per_node)

    rules = replica.sites.placement() if replica.sites is not None else None

    def explain(copy_id: str | None) -> CopyPlacement:
        sited = explain_placement.with_pool_sites(demand, rules, held, snapshot.views, copy_id)
        if copy_id in held:
            assert copy_id is not None
            return explain_placement.explain_placed(copy_id, held[copy_id], sited, snapshot.views, placements.policy)
        unplaced = explain_placement.explain_unplaced(copy_id, sited, snapshot.views, placements.policy, max_nodes,
                                                      lambda never: placement_advice.advice(blocked, never))
        return explain_placement.under_quota(unplaced, refusal)

    # A workflow: its placed copies, then its next one (what a blocked copy's next try, or a scale-out, meets).
    asked = [target.copy_id] if target.copy_id is not None else [*sorted(held), None]
    return PlacementExplanation(workflow_id=row.id, policy=placements.policy.value, nodes_per_copy=demand.nodes,
                                gpus_per_node=demand.gpus_per_node,
                                min_gpu_memory_gb=round(demand.min_gpu_memory_gb, 1),
                                copies=[explain(copy_id) for copy_id in asked])


@router.get("/v1/explain/routing/{endpoint_id}")
async def explain_routing_of(endpoint: VisibleEndpoint, context: Context) -> RoutingExplanation:
    """Each copy behind the endpoint, included in its routing or excluded and why, with the routing policy and
    each revision's share of the requests."""
    return await run_in_threadpool(_routing, context, endpoint)


def _routing(context: ServerContext, endpoint: EndpointRow) -> RoutingExplanation:
    """Blocking: it reads the store — the same rows `/v1/internal/routes` sends the routers."""
    annotations = endpoint.annotations or {}
    fronts_pool = facts(endpoint.service).fronts_pool
    routed = context.store.load.litellm_routed().get(endpoint.id) if fronts_pool else None
    pool = PoolFacts.from_annotations(annotations)
    known = explain_routing.Endpoint(
        endpoint_id=endpoint.id, workflow_id=endpoint.workflow_id, policy=pool.routing_policy or DEFAULT_POLICY,
        weights=traffic_of(annotations), fronts_pool=fronts_pool,
        litellm_routed=None if routed is None else frozenset(routed), service=not pool.pool and not fronts_pool)
    rows = context.store.replicas(endpoint.id)
    rules = pool.sites  # site_local's ranks, as the routes table sends them (issue 36)
    sites = copy_sites(context.store.session, [r.copy_id for r in rows]) if rules is not None else {}
    copies = [explain_routing.PoolCopy(copy_id=r.copy_id, revision=r.revision, ready=r.ready, draining=r.draining,
                                       site=sites.get(r.copy_id),
                                       site_rank=rules.rank(sites.get(r.copy_id)) if rules is not None else 0)
              for r in rows]
    now = time.time()
    # What the endpoint proxies reported of each copy's /metrics within 30 s; LiteLLM picks its own copies and its
    # scrapes are its own, and a copy no proxy reported is not judged on them (docs/explain.md).
    reported = {} if fronts_pool else context.store.scrapes.of([c.copy_id for c in copies], now)
    scrapes = {copy_id: explain_routing.Scrape(scraped_at=at, failed_at=failed)
               for copy_id, (at, failed) in reported.items()} or None
    return explain_routing.explain_routing(known, copies, scrapes, now)


@router.get("/v1/explain/failure/{target_id}")
async def explain_failure_of(target: ExplainedTarget, context: Context) -> FailureExplanation:
    """Every recorded end of a copy (or of each copy of a workflow): the pool's reasons with node, rank, exit
    status and signal where recorded, and the last lines of its ranks' logs this caller may see."""
    status, unread = None, None
    try:
        client = await context.temporal()
        status = await pool_status(client.get_workflow_handle(target.access.row.id), rpc_timeout=QUERY_TIMEOUT)
    except (BerthError, RPCError, WorkflowQueryFailedError, TimeoutError) as error:
        unread = f"{type(error).__name__}: is the control worker up?"
    logs = await run_in_threadpool(_copy_logs, context, target)
    access = target.access
    return explain_failure.explain_failure(access.row.id, target.copy_id, status, unread, logs, access.redact)


def _copy_logs(context: ServerContext, target: Target) -> dict[str, list[explain_failure.LogFile]]:
    """Blocking: each copy's log files under the state dir, their last lines where this caller may read them."""
    root = context.state.workflow_logs(target.access.row.id)
    prefix = f"{target.access.row.id}{COPY_MARK}"
    found: dict[str, list[explain_failure.LogFile]] = {}
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for folder in folders:
        if not folder.name.startswith(prefix) or target.copy_id not in (None, folder.name):
            continue
        found[folder.name] = [
            explain_failure.LogFile(job=path.stem, lines=tail(path, explain_failure.LOG_LINES).splitlines()
                                    if target.access.may_read_job(path.stem) else None)
            for path in sorted(folder.glob("*.log"))]
    return found
