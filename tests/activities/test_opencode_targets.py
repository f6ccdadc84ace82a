"""The OpenCode workflow's provider for each endpoint it reaches (issue 31): a gateway's models take their pools'
contexts from the API's client facts, not the entry's MaxContextSize; a pinned model endpoint keeps
MaxContextSize (submission held it to the model's)."""

from __future__ import annotations

import httpx

from activities.opencode_launch import _target
from berth.api_client import ApiClient
from workflows.payloads import FrontRun

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
URL = "http://proxy/endpoints/ep-gw"
RUN = FrontRun(workflow_id="wf", endpoint_id="ep-oc", name="opencode", kind="opencode", owner="alice",
               address="127.0.0.1", port=1, options={"max_context": "32768"})


def _facts(request: httpx.Request) -> httpx.Response:
    assert request.url.path == "/v1/endpoints/ep-gw/client-config"
    models = [{"model_id": SMOL, "max_context": 8192, "tool_calling": True},
              {"model_id": QWEN, "max_context": 65536, "tool_calling": True}]
    return httpx.Response(200, json={"endpoint_id": "ep-gw", "workflow_id": "gw", "url": URL, "scope": "group",
                                     "model_id": QWEN, "max_context": 65536, "tool_calling": True,
                                     "proxy": False, "models": models})


async def test_a_gateway_s_models_get_their_pools_contexts() -> None:
    async with ApiClient("http://api", "t", transport=httpx.MockTransport(_facts)) as api:
        target = await _target(api, RUN, URL, "ep-gw", "gateway", (QWEN, SMOL))
    assert {model: target.limit(model) for model in target.model_ids} == {
        SMOL: {"context": 8192, "output": 2048}, QWEN: {"context": 65536, "output": 8192}}


async def test_a_pinned_model_endpoint_keeps_max_context_size() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no API call expected: {request.url}")

    async with ApiClient("http://api", "t", transport=httpx.MockTransport(refuse)) as api:
        target = await _target(api, RUN, "http://proxy/endpoints/ep-a", "ep-a", "vllm", (QWEN,))
    assert target.limit(QWEN) == {"context": 32768, "output": 8192}
