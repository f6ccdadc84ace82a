"""`/openapi.json` is the contract: Schemathesis generates requests from it for every operation and runs all its
checks on the answers (no 5xx, every status and body as documented, schema-valid requests accepted and invalid
ones refused, `Allow` as documented), in process against the real app on a real SQLite store.

Temporal-backed routes run against `NoWorkflowsTemporal`: a Temporal that accepts every start and knows no
workflow, so that a route reaching Temporal answers as it does for an unknown workflow (404) rather than the 503 of
an unreachable one, which says nothing of the input. Bounded and seeded: a few examples per operation, the same
ones on every run."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance
from temporalio.service import RPCError, RPCStatusCode

from berth.contracts import EvictRequest, EvictResult, ModelRecord
from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext
from server.refusals import PATH_ID_MAX_LENGTH, PATH_ID_PATTERN
from server.request_limits import ID

ADMIN = Identity(user="contract-admin", groups=("default",), org="default", admin=True)
NO_TEMPORAL = "127.0.0.1:1"  # never dialled: the context holds NoWorkflowsTemporal

# Operations whose refusal of a schema-valid value depends on the cluster's settings, the store's state or another
# field, which no schema states (a token lifetime over the cluster's cap, a model path outside its model dirs, a
# split of revisions the workflow does not have, an hf secret's value that is not its JSON, a backup made under other
# keys or restored over a store in use): a 400 or 409 there is the contract, not a breach of it.
STATEFUL_REFUSALS = {"POST /v1/secrets", "POST /v1/admin/restore",
    "POST /v1/users/{name}/tokens", "POST /v1/endpoints/{endpoint_id}/tokens", "POST /v1/models",
    "PUT /v1/internal/endpoints/{endpoint_id}/traffic", "POST /v1/workflows", "POST /v1/keys",
}


class _NoSuchWorkflow:
    """A workflow handle of a Temporal that has no such workflow: every call is Temporal's NOT_FOUND."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async def refused(*_args: Any, **_kwargs: Any) -> Any:
            raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")

        return refused


class NoWorkflowsTemporal:
    """A Temporal client that starts whatever it is asked to and has no workflow to describe, signal or update."""

    async def start_workflow(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    def get_workflow_handle(self, *_args: Any, **_kwargs: Any) -> _NoSuchWorkflow:
        return _NoSuchWorkflow()


async def _no_job(_context: ServerContext, _record: ModelRecord, _kind: str, _job_id: str,
                  _waiter: str | None = None) -> None:
    return None


async def _nothing_evicted(_context: ServerContext, request: EvictRequest) -> EvictResult:
    return EvictResult.model_validate({"budget_bytes": request.budget_bytes or 0, "before_bytes": 0,
                                     "after_bytes": 0})


@pytest.fixture(scope="module")
def contract_app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    context = build_context(Path(tmp_path_factory.mktemp("contract")), NO_TEMPORAL)
    context._temporal = NoWorkflowsTemporal()  # type: ignore[assignment]  # the fake, never dialled
    context.model_jobs, context.model_cache_evict = _no_job, _nothing_evicted
    # A ready node, so that routes placing something find one (none at all is the control plane's 503).
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "simulator", "gpus": []}, 30000, None)
    app = create_app(context)
    app.state.admin_headers = {"Authorization": f"Bearer {context.signing.api_token(ADMIN)}"}
    return app


@pytest.fixture(scope="module")
def contract(contract_app: FastAPI) -> Any:
    schema = schemathesis.openapi.from_asgi("/openapi.json", contract_app)
    # No generated Authorization: every call carries the administrator's token (a case "without it" would not be).
    schema.config.generation.update(max_examples=5, deterministic=True, database="none",
                                    with_security_parameters=False)
    schema.config.phases.update(phases=["examples", "fuzzing"])  # the coverage phase: thousands of cases, minutes
    return schema


schema = schemathesis.pytest.from_fixture("contract")


@schema.parametrize()
@settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_the_api_answers_as_its_document_says(case: Any, contract_app: FastAPI) -> None:
    excluded = [positive_data_acceptance] if case.operation.label in STATEFUL_REFUSALS else []
    case.call_and_validate(headers=contract_app.state.admin_headers, excluded_checks=excluded)


async def test_an_empty_heartbeat_is_a_documented_one_line_refusal(contract_app: FastAPI) -> None:
    """The issue's own case: `POST /v1/nodes/{id}/heartbeat` with `{}` answered 500; now 422 in the one error
    shape, which the operation documents."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=contract_app), base_url="http://api",
                                 headers=contract_app.state.admin_headers) as api:
        answer = await api.post("/v1/nodes/node-2/heartbeat", json={})
        document = (await api.get("/openapi.json")).json()
    assert answer.status_code == 422, answer.text
    assert set(answer.json()) == {"detail", "code"} and answer.json()["code"] == "invalid_request"
    assert "\n" not in answer.json()["detail"]
    refusal = document["paths"]["/v1/nodes/{node_id}/heartbeat"]["post"]["responses"]["422"]
    assert refusal["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Refusal"}


async def test_a_heartbeat_count_the_store_cannot_keep_is_refused_as_the_document_says(contract_app: FastAPI) -> None:
    """Schemathesis's find in a CI run: `cpus` past the store's Integer column was schema-valid and refused (400,
    "too large for Berth to store"); the bound is now in the schema, so the refusal is the documented 422."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=contract_app), base_url="http://api",
                                 headers=contract_app.state.admin_headers) as api:
        document = (await api.get("/openapi.json")).json()
        beat = {"address": "127.0.0.1", "engine": "simulator"}
        kept = await api.post("/v1/nodes/node-3/heartbeat", json={**beat, "cpus": 2**31 - 1})
        refused = await api.post("/v1/nodes/node-3/heartbeat", json={**beat, "cpus": 1084086282964935507968})
    assert document["components"]["schemas"]["NodeInventory"]["properties"]["cpus"]["maximum"] == 2**31 - 1
    assert kept.status_code == 200, kept.text
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_request", refused.text


@pytest.mark.parametrize("value", ["a", "A-1_b.c", "a.", "a.b.c", "a..b", ".a", "-a", "a/b", "a b", "é", "a" * 128,
                                   "a" * 129, "a\n"])
def test_the_documented_path_id_grammar_is_the_enforced_one(value: str) -> None:
    documented = re.fullmatch(PATH_ID_PATTERN, value) is not None and len(value) <= PATH_ID_MAX_LENGTH
    enforced = ID.fullmatch(value) is not None and ".." not in value
    assert documented == enforced
