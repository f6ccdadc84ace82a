"""Internal routes (`/v1/internal/...`): what the control worker, node agents, the endpoint proxy, a
pool's LiteLLM sync hook and a discovering gateway call. Administrators' (Berth's own services') tokens,
save where a route names a narrower guard (an endpoint's service token, a gateway's replica-keys token)."""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Depends
from starlette.concurrency import run_in_threadpool

from berth.contracts import (
    CopyReadiness,
    CopyRecord,
    EndpointFront,
    FenceRequest,
    FrontPort,
    FrontPortRequest,
    Jwks,
    LoadReport,
    OwnerToken,
    OwnerTokenRequest,
    PoolFacts,
    ReplicaKeysList,
    ReplicaKeysToken,
    RequestCounters,
    ReserveRequest,
    ReserveResult,
    ResolvedSecret,
    ResolveRequest,
    RoutesTable,
    ScrapeReport,
    ServiceCopies,
    ServiceCopy,
    ServiceToken,
    TokenLapse,
    endpoint_limits,
)
from berth.contracts.pool_facts import SiteRouting
from berth.errors import NotFoundError, UserInputError
from berth.kinds import facts
from berth.routing_rules import revision_weighted
from berth.security import API_AUDIENCE, Identity
from berth.tokens import TokenKind
from server import copy_events, events, usage_report
from server.access import in_scope
from server.context import Context, ServerContext
from server.guards import Admin, replica_keys_owner, service_audience, service_or_admin
from server.refusals import refusals
from server.replica_keys import REPLICA_KEYS_TOKEN_TTL_S, discoverable
from server.store.copy_outcomes import traffic_of
from server.store.copy_sites import copy_sites
from server.store.database import ReplicaRecord
from server.store.gpu_power import copies_power_w
from server.store.load_reports import AutoscalerLease, AutoscalerView
from server.store.secrets import Secrets
from server.store.tables import EndpointRow
from server.token_minting import mint_endpoint_token
from server.views import replica_view

log = logging.getLogger(__name__)
router = APIRouter(responses=refusals(409, 503))  # a model name taken; no free service port
ServiceOrAdmin = Depends(service_or_admin)
# A LiteLLM service reads its pool's replica list with this token for as long as it runs; it reaches
# nothing else (its audience is one endpoint's service routes), so a long life costs little.
SERVICE_TOKEN_TTL_S = 365 * 24 * 3600
MAX_REPORTED_COPIES = 256


# --- keys, secrets and tokens for Berth's own services --------------------------------------------
@router.get("/v1/internal/keys", response_model=Jwks)
async def internal_keys(context: Context, _who: Admin) -> dict[str, Any]:
    """The verification keys for Berth's own services, whether or not JWKS publication is on."""
    return context.signing.jwks()


@router.post("/v1/internal/secrets/resolve", response_model=ResolvedSecret)
async def resolve_secret(body: ResolveRequest, context: Context, _who: Admin) -> dict[str, str]:
    owner = await run_in_threadpool(context.store.identity, body.user)
    kind, value = await run_in_threadpool(Secrets(context.store).resolve, owner, body.ref)
    return {"type": kind, "value": value}


@router.post("/v1/internal/endpoints/{endpoint_id}/service-token", response_model=ServiceToken)
async def service_token(endpoint_id: str, context: Context, _who: Admin) -> dict[str, str]:
    """A token that reads this endpoint's replica list and nothing else (for its LiteLLM service)."""
    await run_in_threadpool(context.store.endpoint, endpoint_id)
    claims = {"sub": f"service:{endpoint_id}", "aud": service_audience(endpoint_id), "typ": "service"}
    return {"token": context.signing.sign(claims, SERVICE_TOKEN_TTL_S)}


@router.post("/v1/internal/users/{user}/tokens", response_model=OwnerToken)
async def owner_token_for_service(user: str, body: OwnerTokenRequest, context: Context,
                                  _who: Admin) -> dict[str, Any]:
    """A token speaking for a workflow's owner, for its service (the gateway polls the endpoints API,
    OpenCode calls model endpoints, as the owner). At most 7 days: a restart renews it."""
    owner = await run_in_threadpool(context.store.identity, user)
    ttl = min(body.ttl_s, 7 * 24 * 3600, context.settings.max_token_expiration_s)
    if body.endpoint_id:
        # Recorded like any endpoint token: `berth endpoint tokens` lists it, and it can be revoked.
        token, _claims = await run_in_threadpool(mint_endpoint_token, context, owner, body.endpoint_id, ttl, _who.user,
                                                 "a workflow service's, as its owner")
    else:
        token = context.signing.api_token(owner, ttl, TokenKind.SERVICE.value, "a workflow service's, as its owner")
        await run_in_threadpool(_record_minted, context, token, _who.user)
    return {"token": token, "expires_at": time.time() + ttl}


def _record_minted(context: ServerContext, token: str, minted_by: str) -> None:
    """Record an API token minted outside the token routes (its kind and note travel in its claims)."""
    claims = context.verifier.verify(token, API_AUDIENCE)
    context.tokens.record(claims, str(claims.get("use", TokenKind.USER.value)), str(claims.get("note", "")), minted_by)


@router.post("/v1/internal/users/{user}/replica-keys-token")
async def replica_keys_token(user: str, context: Context, _who: Admin) -> ReplicaKeysToken:
    """Minted by a node agent for the gateway it starts for `user`; only the route below reads it."""
    owner = await run_in_threadpool(context.store.identity, user)  # an unknown user: 404
    return ReplicaKeysToken(token=context.signing.replica_keys_token(owner, REPLICA_KEYS_TOKEN_TTL_S))


@router.get("/v1/internal/replica-keys")
async def replica_keys(context: Context,
                       owner: Annotated[Identity, Depends(replica_keys_owner)]) -> ReplicaKeysList:
    """The keys of the copies the token's owner may reach (an administrator's API token: every copy)."""
    endpoints = await run_in_threadpool(context.store.endpoints)
    reachable = {e.id for e in endpoints if discoverable(e) and (owner.admin or in_scope(e, owner))}
    replicas = await run_in_threadpool(context.store.replicas)
    return ReplicaKeysList(keys={r.copy_id: context.replica_keys.for_copy(r.copy_id) for r in replicas
                                 if r.endpoint_id in reachable})


# --- placement: reservations, fencing, service ports -----------------------------------------------
@router.post("/v1/internal/reservations", response_model=ReserveResult)
async def reserve(request: ReserveRequest, context: Context, _who: Admin) -> dict[str, Any]:
    result = await run_in_threadpool(context.store.placements.reserve, request)
    await run_in_threadpool(events.record, context.store, copy_events.reserved(request, result))
    return result.model_dump(mode="json")


@router.delete("/v1/internal/reservations/{copy_id}", status_code=204)
async def release(copy_id: str, context: Context, _who: Admin, later: BackgroundTasks) -> None:
    if await run_in_threadpool(context.store.placements.release, copy_id):
        # After the answer: how the copy ended is its workflow's to say, and asking must not delay the release.
        later.add_task(copy_events.record_end, context, copy_id)


@router.post("/v1/internal/reservations/{copy_id}/fence", status_code=204)
async def fence(copy_id: str, request: FenceRequest, context: Context, _who: Admin) -> None:
    await run_in_threadpool(context.store.placements.fence, copy_id, request.nodes)


@router.post("/v1/internal/service-ports", response_model=FrontPort)
async def reserve_service_port(request: FrontPortRequest, context: Context, _who: Admin) -> dict[str, Any]:
    node, port = await run_in_threadpool(context.store.placements.reserve_service_port, request.owner)
    return FrontPort(node_id=node.id, address=node.address, port=port).model_dump(mode="json")


# --- replicas: what copies publish --------------------------------------------------------------------
@router.put("/v1/internal/replicas/{copy_id}", status_code=204)
async def publish(copy_id: str, record: CopyRecord, context: Context, _who: Admin) -> None:
    # A copy stopped meanwhile publishes nothing (Placements.publish); the late publish is not an error.
    published = await run_in_threadpool(context.store.placements.publish, record.workflow_id, record.endpoint_id,
                                        copy_id, record.url, record.ready, record.revision)
    if published and record.ready:
        await run_in_threadpool(events.record, context.store, copy_events.ready(copy_id, record))


@router.put("/v1/internal/replicas/{copy_id}/ready", status_code=204)
async def replica_readiness(copy_id: str, body: CopyReadiness, context: Context, _who: Admin) -> None:
    await run_in_threadpool(context.store.set_replica_ready, copy_id, body.ready)


@router.post("/v1/internal/replicas/{copy_id}/drain", status_code=204)
async def drain_replica(copy_id: str, context: Context, _who: Admin) -> None:
    await run_in_threadpool(context.store.drain_replica, copy_id)


@router.delete("/v1/internal/replicas/{copy_id}", status_code=204)
async def unpublish(copy_id: str, context: Context, _who: Admin) -> None:
    await run_in_threadpool(context.store.remove_replica, copy_id)


# --- endpoints: their services, load and routing table ----------------------------------------------
@router.post("/v1/internal/endpoints/{endpoint_id}/load", status_code=204)
async def report_load(endpoint_id: str, body: LoadReport, context: Context, _who: Admin) -> None:
    """Requests the endpoint proxy admitted for this endpoint since its last report."""
    await run_in_threadpool(context.store.load.add_front_door, endpoint_id, body.requests)
    # How each copy answered: bounded like the proxy's report, whatever a caller sends.
    copies = dict(list(body.copies.items())[:MAX_REPORTED_COPIES])
    await run_in_threadpool(context.store.outcomes.add, endpoint_id, copies)


@router.put("/v1/internal/scrapes", status_code=204)
async def report_scrapes(body: ScrapeReport, context: Context, _who: Admin) -> None:
    """How fresh each copy's /metrics figures are at the reporting endpoint proxy (`berth explain routing`)."""
    await run_in_threadpool(context.store.scrapes.report, body.copies)


@router.post("/v1/internal/autoscaler")
async def autoscaler_tick(lease: AutoscalerLease, context: Context, _who: Admin,
                          after: BackgroundTasks) -> AutoscalerView:
    """What the control worker's autoscaler reads each tick, once it holds (or renewed) the lease. After the answer,
    the usage budgets are checked at most once a minute: the tick is the cluster's one steady caller, so an exceeded
    budget is announced even when no one reads usage, and the tick never waits for it."""
    view = await run_in_threadpool(_autoscaler_view, context, lease)
    after.add_task(usage_report.check_budgets_on_tick, context)
    return view


def _autoscaler_view(context: ServerContext, lease: AutoscalerLease) -> AutoscalerView:
    """Blocking. The leader's tick also samples the pools' ready copies for their endpoints' history, once a
    minute (server/store/endpoint_history.py)."""
    view = context.store.load.autoscaler_view(lease)
    if view.leader:
        context.store.history.sample_ready([pool.endpoint_id for pool in view.pools])
    return view


@router.delete("/v1/internal/endpoints/{endpoint_id}", status_code=204)
async def remove_endpoint(endpoint_id: str, context: Context, _who: Admin) -> None:
    await run_in_threadpool(context.store.remove_endpoint, endpoint_id)


@router.put("/v1/internal/endpoints/{endpoint_id}/service", status_code=204)
async def set_endpoint_service(endpoint_id: str, update: EndpointFront, context: Context, _who: Admin) -> None:
    await run_in_threadpool(context.store.set_endpoint_service, endpoint_id, update.service, update.url)


@router.put("/v1/internal/endpoints/{endpoint_id}/token-lapse", status_code=204)
async def token_lapse(endpoint_id: str, body: TokenLapse, context: Context, _who: Admin) -> None:
    """When the tokens a service borrowed for its owner lapse (the earliest; a restart of the service
    reports afresh): `describe` says so and that a restart renews them."""
    await run_in_threadpool(context.store.note_token_lapse, endpoint_id, body.expires_at)


@router.post("/v1/internal/endpoints/{endpoint_id}/requests", status_code=204, dependencies=[ServiceOrAdmin])
async def litellm_requests(endpoint_id: str, body: RequestCounters, context: Context) -> None:
    """A Proxy=true pool's LiteLLM sync hook posts its request counters here: the rate that sizes
    the pool is the one measured at its LiteLLM proxy."""
    await run_in_threadpool(context.store.load.add_litellm, endpoint_id, body.pid, body.started_at,
                            body.requests_total, body.copies)


@router.get("/v1/internal/endpoints/{endpoint_id}/replicas", dependencies=[ServiceOrAdmin],
            response_model=ServiceCopies)
async def endpoint_replicas(endpoint_id: str, context: Context) -> ServiceCopies:
    """The pool's copies, as the LiteLLM sync hook reads them (under their old names too, for one
    release). Accepts the endpoint's service token or an administrator's API token."""
    rows, pool_facts, sites = await run_in_threadpool(_pool_reads, context, endpoint_id)
    rules = pool_facts.sites
    return ServiceCopies(
        copies=[ServiceCopy(copy_id=r.copy_id, url=r.url.rstrip("/") + "/v1", ready=r.ready and not r.draining,
                            api_key=context.replica_keys.for_copy(r.copy_id),
                            **_site(sites.get(r.copy_id), rules, with_site=False))
                for r in sorted(rows, key=lambda r: r.copy_id)],
        # LiteLLM's custom routing strategy (gateway.litellm_hooks.policy_routing) routes by it.
        routing_policy=pool_facts.routing_policy or "least_queue")


# exclude_unset: an endpoint without a `limits` override is sent without the field, as before it existed.
@router.get("/v1/internal/routes", response_model=RoutesTable, response_model_exclude_unset=True)
async def routes(context: Context, _who: Admin) -> dict[str, Any]:
    endpoints, pool_facts, routed, revoked, replicas, power, sites = await run_in_threadpool(_table_reads, context)
    by_endpoint: dict[str, list[str]] = {}
    for replica in replicas:
        if replica.ready and not replica.draining:
            by_endpoint.setdefault(replica.endpoint_id, []).append(replica.url)
    pools: dict[str, list[dict[str, Any]]] = {}
    for replica in replicas:
        # Only this admin route and the service routes carry a copy's key (the proxy sends it on).
        pools.setdefault(replica.endpoint_id, []).append(
            {**replica_view(replica), "api_key": context.replica_keys.for_copy(replica.copy_id),
             "revision": replica.revision,
             **({"power_w": power[replica.copy_id]} if replica.copy_id in power else {}),
             **_site(sites.get(replica.copy_id), _rules(pool_facts.get(replica.endpoint_id)))})
    return {"endpoints": [{
        "id": e.id, "scope": e.scope, "owner": e.owner, "org": e.org, "groups": e.groups,
        "service": e.service, "service_url": e.service_url, "copy_urls": sorted(by_endpoint.get(e.id, [])),
        # The pool as routing needs it: every published copy with its state, the policy, and
        # whether a request may wake it (a pool with no copy, not a service).
        "workflow_id": e.workflow_id, "pool": sorted(pools.get(e.id, []), key=lambda r: r["copy_id"]),
        "routing_policy": pool_facts[e.id].routing_policy or "least_queue",
        "wakeable": pool_facts[e.id].pool,
        # Behind LiteLLM: the copies it routes to (None until its sync hook first reported).
        "litellm_routed": routed.get(e.id) if facts(e.service).fronts_pool else None,
        "replicas": sorted(by_endpoint.get(e.id, [])),  # copy_urls' old name, for one release
        **_limits(e.id, e.annotations or {}),
        **_max_context(pool_facts[e.id]),
        **_traffic(e.annotations or {}),
        # Sent only while the endpoint has one: a table without revocations reads as before.
        **({"revoked_tokens": revoked[e.id]} if e.id in revoked else {}),
    } for e in endpoints]}


def _pool_reads(context: ServerContext, endpoint_id: str
                ) -> tuple[list[ReplicaRecord], PoolFacts, dict[str, str | None]]:
    """What a pool's copies for its LiteLLM are made of, read in one trip to the thread pool (each LiteLLM asks each
    second): the copies of the revisions that take traffic, the pool's facts, and each copy's site where a rule
    reads it."""
    rows = context.store.replicas(endpoint_id)
    try:
        annotations = context.store.endpoint(endpoint_id).annotations or {}
    except NotFoundError:
        annotations = {}  # the endpoint is gone; its replica list is empty as well
    # While a split is set, a revision at 0 % is not LiteLLM's to route to either (a blue-green new set
    # before its switch, an old one after it).
    split = traffic_of(annotations)
    rows = [r for r in rows if revision_weighted(split, r.revision)]
    pool_facts = PoolFacts.from_annotations(annotations)
    sites = copy_sites(context.store.session, [r.copy_id for r in rows]) if pool_facts.sites else {}
    return rows, pool_facts, sites


def _table_reads(context: ServerContext) -> tuple[list[EndpointRow], dict[str, PoolFacts], dict[str, tuple[str, ...]],
                                                  dict[str, list[str]], list[ReplicaRecord], dict[str, float],
                                                  dict[str, str | None]]:
    """What the routes table is made of, read in one trip to the thread pool (each every proxy asks each second):
    the endpoints with their pools' facts (read once an endpoint), what each LiteLLM routes to, the revoked tokens,
    the published copies, the power of energy_optimized pools' copies and each copy's site."""
    store = context.store
    endpoints = store.endpoints()
    pool_facts = {e.id: PoolFacts.from_annotations(e.annotations) for e in endpoints}
    replicas = store.replicas()
    return (endpoints, pool_facts, store.load.litellm_routed(), store.endpoint_tokens.revoked_ids(), replicas,
            _energy_readings(context, pool_facts, replicas),
            copy_sites(store.session, [replica.copy_id for replica in replicas]))


def _energy_readings(context: ServerContext, pool_facts: dict[str, PoolFacts], replicas: list[ReplicaRecord]
                     ) -> dict[str, float]:
    """The NVML power of the copies of energy_optimized pools (server/store/gpu_power.py): read for those alone, as
    no other policy weighs it."""
    energy = {endpoint for endpoint, pool in pool_facts.items() if pool.routing_policy == "energy_optimized"}
    if not energy:
        return {}
    with context.store.session() as s:
        return copies_power_w(s, {r.copy_id for r in replicas if r.endpoint_id in energy})


def _rules(pool: PoolFacts | None) -> SiteRouting | None:
    return pool.sites if pool is not None else None


def _site(site: str | None, rules: SiteRouting | None, with_site: bool = True) -> dict[str, Any]:
    """A copy's site and its `site_local` rank, sent only where a site is known or the pool sets a site rule (a
    table without them reads as before: rank 0 for every copy)."""
    if site is None and rules is None:
        return {}
    rank = (rules or SiteRouting()).rank(site)
    return {"site": site, "site_rank": rank} if with_site else {"site_rank": rank}


def _traffic(annotations: dict[str, Any]) -> dict[str, Any]:
    """A rollout's split, sent only while one is set (a table without one reads as before)."""
    split = traffic_of(annotations)
    return {"traffic": split} if split is not None else {}


def _max_context(pool: PoolFacts) -> dict[str, Any]:
    """The pool's MaxContextSize, for the limits' context check; nothing for an endpoint without one."""
    value = pool.max_context
    return {"max_context": value} if value is not None else {}


def _limits(endpoint_id: str, annotations: dict[str, Any]) -> dict[str, Any]:
    """The endpoint's `limits` override as the routes table sends it: the fields it sets, or nothing. An
    invalid one is logged and left out (the cluster's limits apply) rather than failing every proxy's
    table."""
    if annotations.get("limits") is None:
        return {}
    try:
        override = endpoint_limits(annotations["limits"])
    except UserInputError as error:
        log.warning("endpoint %s: %s The cluster's limits apply to it.", endpoint_id, error)
        return {}
    return {"limits": override.model_dump(mode="json", by_alias=True, exclude_unset=True)} if override else {}
