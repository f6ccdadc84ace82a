"""Endpoint policy routes: show an endpoint's policy (its limits override and API-key TTL cap) to anyone
who may see the endpoint; replace or clear it for its owner (who may only tighten the cluster's limits) or
an administrator (anything)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import EndpointPolicy
from server.context import Context
from server.guards import Caller, OwnedEndpoint, VisibleEndpoint
from server.store.endpoint_policy import EndpointPolicies, check_policy, policy_of

router = APIRouter()


# exclude_unset: `limits` shows the fields the override sets, never the defaults of those it leaves alone.
@router.get("/v1/endpoints/{endpoint_id}/policy", response_model=EndpointPolicy, response_model_exclude_unset=True)
async def show_policy(endpoint: VisibleEndpoint) -> EndpointPolicy:
    return policy_of(endpoint)


@router.put("/v1/endpoints/{endpoint_id}/policy", response_model=EndpointPolicy, response_model_exclude_unset=True)
async def replace_policy(body: EndpointPolicy, endpoint: OwnedEndpoint, context: Context,
                         who: Caller) -> EndpointPolicy:
    """Replace the policy: what the body leaves out is cleared. The proxies apply it within a second."""
    check_policy(body, context.limits, who, endpoint)
    return await run_in_threadpool(EndpointPolicies(context.store).replace, endpoint.id, body)


@router.delete("/v1/endpoints/{endpoint_id}/policy", response_model=EndpointPolicy,
               response_model_exclude_unset=True)
async def clear_policy(endpoint: OwnedEndpoint, context: Context) -> EndpointPolicy:
    """Clear the policy: the cluster's limits and key TTL cap apply to the endpoint alone."""
    return await run_in_threadpool(EndpointPolicies(context.store).clear, endpoint.id)
