"""`GET /v1/endpoints/{id}/client-config` through the real app and store (issue 31): a gateway endpoint answers
every model it serves — the Proxy=false pools its owner may reach, each with its pool's MaxContextSize (a model
two pools serve: the smaller) — and its default is the largest context, not SmolLM2's 8,192; a model endpoint
answers its one model. The OpenCode entry's submission holds a pinned gateway's Model and MaxContextSize to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.contracts import EndpointClientFacts, PoolFacts
from berth.errors import UserInputError
from berth.security import Identity
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from server.app import build_context, create_app
from server.context import ServerContext
from server.opencode import check_submission
from tests.server.catalog_rows import start_rows

ALICE = Identity(user="alice", groups=("default",), org="default")
CAROL = Identity(user="carol", groups=("other",), org="other")
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
GPT = "openai/gpt-oss-20b"


def _start(context: ServerContext, entry_name: str, values: dict[str, Any], who: Identity = ALICE) -> str:
    return start_rows(context, entry_name, values, who)


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")  # these routes never reach Temporal
    context.store.ensure_user("alice", org="default", groups=["default"])
    context.store.ensure_user("bob", org="default", groups=["default"])  # in the gateway's scope (group)
    context.store.ensure_user("carol", org="other", groups=["other"])
    return context


@pytest.fixture
def endpoints(context: ServerContext) -> dict[str, str]:
    return {
        "smol": _start(context, "SmolLM2 135M Instruct", {"Proxy": False}),  # MaxContextSize 8192
        "qwen": _start(context, "Qwen3-Coder 30B", {"Proxy": False, "MaxContextSize": 32768}),
        # A second pool of the same model, smaller: a request may reach either, so the model gets 16384.
        "qwen-small": _start(context, "Qwen3-Coder 30B", {"Proxy": False, "MaxContextSize": 16384}),
        # Behind its LiteLLM proxy: the gateway does not discover it.
        "gpt-proxied": _start(context, "gpt-oss-20b", {"Proxy": True}),
        # Another organization's, scope user: out of the gateway owner's reach.
        "gpt-carol": _start(context, "gpt-oss-20b", {"Proxy": False, "Scope": "user"}, CAROL),
        "gateway": _start(context, "LiteLLM Model Gateway", {}),
    }


async def _client_config(context: ServerContext, user: str, endpoint_id: str) -> httpx.Response:
    token = context.signing.api_token(context.store.identity(user), 600)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        return await api.get(f"/v1/endpoints/{endpoint_id}/client-config")


async def test_a_gateway_answers_every_model_it_serves_with_its_pools_context(
        context: ServerContext, endpoints: dict[str, str]) -> None:
    answer = await _client_config(context, "bob", endpoints["gateway"])
    assert answer.status_code == 200, answer.text
    facts = EndpointClientFacts.model_validate(answer.json())
    assert [(m.model_id, m.max_context, m.tool_calling) for m in facts.models] == [
        (SMOL, 8192, True), (QWEN, 16384, True)]
    assert (facts.model_id, facts.max_context) == (QWEN, 16384)  # the default: the largest context
    assert facts.url.endswith(f"/endpoints/{endpoints['gateway']}") and facts.proxy is False


async def test_a_model_endpoint_answers_its_one_model(context: ServerContext, endpoints: dict[str, str]) -> None:
    answer = await _client_config(context, "bob", endpoints["qwen"])
    assert answer.status_code == 200, answer.text
    facts = EndpointClientFacts.model_validate(answer.json())
    assert (facts.model_id, facts.max_context) == (QWEN, 32768)
    assert [m.model_dump() for m in facts.models] == [{"model_id": QWEN, "max_context": 32768,
                                                       "tool_calling": True}]


async def test_a_rollout_s_context_is_the_one_given(context: ServerContext, endpoints: dict[str, str]) -> None:
    """The endpoint's pool facts follow the revision that serves (server/store/revisions.py): so do the limits."""
    smol = context.store.endpoint(endpoints["smol"])
    revision_2 = PoolFacts.from_annotations(smol.annotations).model_copy(update={"max_context": 4096})
    context.store.revisions.serve(context.store.workflow(smol.workflow_id), 2, revision_2)
    facts = EndpointClientFacts.model_validate((await _client_config(context, "bob", endpoints["gateway"])).json())
    assert facts.models[0].model_dump() == {"model_id": SMOL, "max_context": 4096, "tool_calling": True}


async def test_a_gateway_that_discovers_nothing_is_refused_in_one_line(context: ServerContext) -> None:
    gateway = _start(context, "LiteLLM Model Gateway", {})
    answer = await _client_config(context, "alice", gateway)
    assert answer.status_code == 400
    assert f"Endpoint {gateway} is a gateway that discovers no model yet" in answer.text


def _opencode(context: ServerContext, endpoint_id: str, **values: Any) -> None:
    entry = find_entry("OpenCode")
    url = f"{context.settings.proxy_url}/endpoints/{endpoint_id}/v1"
    definition = render(entry, resolve_values(entry, {"Endpoint": url, **values}))
    check_submission(context.store, definition, context.settings.proxy_url)


def test_opencode_pinned_to_an_endpoint_is_held_to_its_models(context: ServerContext,
                                                            endpoints: dict[str, str]) -> None:
    gateway = endpoints["gateway"]
    _opencode(context, gateway, Model=SMOL)
    # MaxContextSize is a pinned model endpoint's: a gateway's models take their pools' own, so it is not held.
    _opencode(context, gateway, Model=SMOL, MaxContextSize=65536)
    with pytest.raises(UserInputError) as refused:
        _opencode(context, endpoints["smol"], MaxContextSize=32768)
    assert str(refused.value) == (f"MaxContextSize=32768 is larger than endpoint {endpoints['smol']} ({SMOL}) "
                                  "serves (8192 tokens); use MaxContextSize=8192 or less.")
    with pytest.raises(UserInputError) as refused:
        _opencode(context, gateway, Model=GPT, MaxContextSize=8192)
    assert str(refused.value) == (f"Model={GPT}: endpoint {gateway} serves {SMOL}, {QWEN} only; use exactly an "
                                  "id its /v1/models lists.")
