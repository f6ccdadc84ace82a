"""The control plane's routers, one per resource; `create_app` includes them in this order."""

from __future__ import annotations

from fastapi import APIRouter

from server.routes import (
    audit,
    backup,
    capacity,
    catalog,
    endpoint_history,
    endpoint_policy,
    endpoint_tokens,
    endpoints,
    events,
    explain,
    health,
    identity,
    internal,
    keys,
    litellm_keys,
    metrics,
    mig,
    model_reports,
    models,
    nodes,
    policies,
    revisions,
    scaling,
    secrets,
    slurm,
    tokens,
    traffic,
    usage,
    workflows,
)

ROUTERS: tuple[APIRouter, ...] = (
    tokens.router, health.router, catalog.router, workflows.router, endpoints.router, endpoint_tokens.router,
    endpoint_policy.router, secrets.router, identity.router, nodes.router, keys.router, litellm_keys.router,
    internal.router, audit.router, models.router, model_reports.router, revisions.router, scaling.router,
    traffic.router, metrics.router, capacity.router, explain.router, backup.router, endpoint_history.router,
    events.router, policies.router, slurm.router, usage.router, mig.router,
)
