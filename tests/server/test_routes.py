"""The control plane serves the same REST surface as before its routers were split out of one function:
every (method, path) of `routes_before_restructuring.json` (recorded from the old `create_app`) and the
few added since, no other, each reaching a route, and the same set in `/openapi.json`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from server.app import build_context, create_app

BEFORE = Path(__file__).with_name("routes_before_restructuring.json")
# Routes added since, each by the change that needed it: the control worker's autoscaler reads the load
# through the API (issue 14: the autoscaler left the API process).
# Issue 15: the audit chain (the proxy's batches, the listing and the verification) and API keys (their
# own resource, and the endpoint proxy's verify and reserve).
ADDED = {("POST", "/v1/internal/autoscaler"), ("POST", "/v1/internal/audit"), ("GET", "/v1/audit"),
         ("GET", "/v1/audit/verify"),
         ("POST", "/v1/keys"), ("GET", "/v1/keys"), ("GET", "/v1/keys/{key_id}"),
         ("POST", "/v1/keys/{key_id}/rotate"), ("DELETE", "/v1/keys/{key_id}"),
         ("POST", "/v1/internal/keys/verify"), ("POST", "/v1/internal/keys/{key_id}/reserve"),
         # LiteLLM's key contract on LiteLLM-fronted endpoints, answered from Berth's keys for the proxy.
         *(("POST", f"/v1/internal/endpoints/{{endpoint_id}}/litellm-keys/{action}")
           for action in ("generate", "info", "delete", "regenerate")),
         # An endpoint's policy: its limits override and API-key TTL cap (`berth endpoint policy`).
         *((method, "/v1/endpoints/{endpoint_id}/policy") for method in ("GET", "PUT", "DELETE")),
         # Issue 16: the model registry, its jobs and cache, and what model jobs and workflows report.
         ("POST", "/v1/models"), ("GET", "/v1/models"), ("GET", "/v1/models/{name}"),
         ("DELETE", "/v1/models/{name}"), ("GET", "/v1/models/{name}/status"),
         ("POST", "/v1/models/{name}/materialize"), ("POST", "/v1/models/{name}/verify"),
         ("GET", "/v1/model-jobs"), ("POST", "/v1/models/cache/evict"),
         ("GET", "/v1/internal/models/{model_id}"), ("PUT", "/v1/internal/models/{model_id}/state"),
         ("PUT", "/v1/internal/models/{model_id}/progress"), ("POST", "/v1/internal/models/use"),
         ("POST", "/v1/internal/models/release"),
         # Issue 17: a workflow's revisions, its rollout, and draining it with a grace.
         ("POST", "/v1/workflows/{workflow_id}/revisions"), ("GET", "/v1/workflows/{workflow_id}/revisions"),
         ("GET", "/v1/workflows/{workflow_id}/revisions/{revision}"), ("GET", "/v1/workflows/{workflow_id}/rollout"),
         ("POST", "/v1/workflows/{workflow_id}/rollout"), ("POST", "/v1/workflows/{workflow_id}/drain"),
         # Issue 17: the autoscaler's explanation, recorded by the control worker and read by explain-scaling.
         ("GET", "/v1/workflows/{workflow_id}/scaling"), ("PUT", "/v1/internal/workflows/{workflow_id}/scaling"),
         # Issue 17: a rollout's traffic split and a revision's health as the endpoint proxies saw it.
         ("PUT", "/v1/internal/endpoints/{endpoint_id}/traffic"),
         ("GET", "/v1/internal/endpoints/{endpoint_id}/revision-health"),
         ("PUT", "/v1/internal/workflows/{workflow_id}/served-revision"),
         # Issue 19: the control plane's Prometheus figures (loopback or an administrator).
         ("GET", "/metrics"),
         # Issue 31, item 10: an endpoint's tokens, listed (never the tokens) and revoked one by one.
         ("GET", "/v1/endpoints/{endpoint_id}/tokens"), ("DELETE", "/v1/endpoints/{endpoint_id}/tokens/{token_id}"),
         # Issue 34: free and total GPUs per node and GPU model, and which catalog entries would fit now.
         ("GET", "/v1/capacity"),
         # Issue 34: where the scheduler placed a workflow's copies and why, or what an unplaced copy meets.
         ("GET", "/v1/explain/placement/{target_id}"),
         # Issue 34: the control plane's desired state backed up, and restored into an empty one.
         ("GET", "/v1/admin/backup"), ("POST", "/v1/admin/restore"),
         # Issue 34: which copies behind an endpoint get its requests, and every recorded end of a copy.
         ("GET", "/v1/explain/routing/{endpoint_id}"), ("GET", "/v1/explain/failure/{target_id}"),
         # Issue 34: an endpoint's recent minutes (requests, failures, p50/p99, ready copies) for its page's chart.
         ("GET", "/v1/endpoints/{endpoint_id}/history"),
         # Issue 34: the cluster's event stream.
         ("GET", "/v1/events"),
         # Issue 34: policies and quotas per user, group and organization, and how far the quotas let a pool grow.
         ("GET", "/v1/policies"), ("GET", "/v1/policies/{kind}/{name}"), ("PUT", "/v1/policies/{kind}/{name}"),
         ("DELETE", "/v1/policies/{kind}/{name}"), ("POST", "/v1/internal/workflows/{workflow_id}/scale-allowance"),
         # Issue 35: a Slurm cluster's nodes, read-only.
         ("GET", "/v1/slurm/nodes"),
         # Issue 34: the endpoint proxies' scrapes of each copy, for explain routing.
         ("PUT", "/v1/internal/scrapes"),
         # Issue 34: usage (GPU-seconds, requests, tokens) by key and period, and budgets per organization or group.
         ("GET", "/v1/usage"), ("GET", "/v1/usage/budgets"), ("PUT", "/v1/usage/budgets"),
         ("DELETE", "/v1/usage/budgets/{scope}/{name}/{period}"),
         # Issue 36: MIG slices of a node's H100s, as records placement goes by.
         ("GET", "/v1/nodes/{node_id}/mig"), ("POST", "/v1/nodes/{node_id}/mig"),
         ("PUT", "/v1/nodes/{node_id}/mig/{slice_id}"), ("DELETE", "/v1/nodes/{node_id}/mig/{slice_id}")}
EXPECTED = {(method, path) for method, path in json.loads(BEFORE.read_text())} | ADDED
CONSOLE = "/ui"  # the web console's HTML pages: not the REST API (tests/console/ covers them)
DOCS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}  # FastAPI's own, not in the schema


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    return create_app(build_context(tmp_path, "127.0.0.1:1"))  # no route below reaches Temporal


def test_the_app_serves_exactly_the_routes_it_served_before(app: FastAPI) -> None:
    served = {(method, route.path) for route in iter_route_contexts(app.routes) for method in route.methods or ()
              if not route.path.startswith(CONSOLE)}
    assert served == EXPECTED, {"missing": sorted(EXPECTED - served), "new": sorted(served - EXPECTED)}


async def test_every_route_is_reached_under_its_method_and_path(app: FastAPI) -> None:
    """A request without a token to each (method, path) is answered by its route (or its guard), never by
    the router's own 404 Not Found or 405 Method Not Allowed."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
        for method, path in sorted(EXPECTED):
            response = await api.request(method, re.sub(r"\{[^}]+\}", "x1", path))
            unrouted = response.status_code == 405 or (
                response.status_code == 404 and response.content in (b"", b'{"detail":"Not Found"}'))
            assert not unrouted, f"{method} {path}: {response.status_code} {response.text[:200]}"


async def test_openapi_still_documents_every_route(app: FastAPI) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
        schema = (await api.get("/openapi.json")).json()
    documented = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert documented == {(method, path) for method, path in EXPECTED if path not in DOCS}
