"""Every parameter of the "LiteLLM Model Gateway" entry takes effect or is refused (issue 13 item 3), and
the gateway answers with LiteLLM's contract: its master key, its 400 for an unknown model, its
/v1/models. Started as the catalog entry, through the CLI, on a simulated stack."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import RunningStack, free_port_base, wait_for

MASTER_KEY = "sk-gateway-master-0123456789abcdef"
QWEN = "Qwen/Qwen3-0.6B"
GPT = "openai/gpt-oss-20b"
SLEEPER = "Qwen/Qwen3-1.7B"
CHAT = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
NO_KEY = {"error": {"message": "Authentication Error, No api key passed in.", "type": "auth_error",
                    "param": "None", "code": "401"}}
WRONG_KEY = {"error": {"message": "Authentication Error, Invalid proxy server token passed", "type": "auth_error",
                       "param": "None", "code": "401"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    state = Path(tmp_path_factory.mktemp("gateway-parameters")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="8x80GB",
                         extra_env={"BERTH_SIM_TOKENS_PER_SECOND": "0"}).start()
    try:
        stack.cli("secret", "create", "secret://user/gateway-key", input=MASTER_KEY)
        qwen = stack.start_entry("vLLM", f"Model=hf://{QWEN},Proxy=false,MinReplicas=2,MaxReplicas=2")
        sleeper = stack.start_entry("vLLM", f"Model=hf://{SLEEPER},Proxy=false,MinReplicas=0")
        keyed = stack.start_entry("LiteLLM Model Gateway", "Scope=public,MasterKeySecret=secret://user/gateway-key,"
                                  "RoutingPolicy=round_robin,DiscoveryInterval=1")
        generated = stack.start_entry("LiteLLM Model Gateway", "RoutingPolicy=most_free_kv,DiscoveryInterval=120")
        yield {"stack": stack, "qwen": qwen, "sleeper": sleeper, "keyed": stack.endpoint(keyed),
               "generated": stack.endpoint(generated),
               "keyed_id": keyed, "generated_id": generated}
    finally:
        stack.stop()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _models(url: str, headers: dict[str, str]) -> list[str]:
    return [m["id"] for m in httpx.get(url + "/v1/models", headers=headers, timeout=10).json()["data"]]


def _chat(url: str, model: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers=headers, timeout=30, json={"model": model, **CHAT})


def _served(stack: RunningStack, workflow_id: str) -> list[float]:
    counts = []
    for replica in sorted(stack.describe(workflow_id)["copies"], key=lambda r: r["url"]):
        text = stack.copy_metrics(replica)
        counts.append(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                          if line.startswith("vllm:request_success_total")))
    return counts


def _idle(stack: RunningStack, workflow_id: str) -> bool:
    """Whether every copy's engine reports nothing running or waiting."""
    for replica in stack.describe(workflow_id)["copies"]:
        text = stack.copy_metrics(replica)
        if any(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))):
            return False
    return True


def _service_url(stack: RunningStack, endpoint_id: str) -> str:
    """The gateway process's own URL (its /health answers before the master key)."""
    routes = stack.api("GET", "/v1/internal/routes").json()["endpoints"]
    return str(next(r["service_url"] for r in routes if r["id"] == endpoint_id))


def test_master_key_secret_is_enforced_as_litellm_does(world: dict[str, Any]) -> None:
    stack, url = world["stack"], world["keyed"]["url"]
    anonymous = httpx.get(url + "/v1/models", timeout=10)
    assert (anonymous.status_code, anonymous.json()) == (401, NO_KEY)
    wrong = _chat(url, QWEN, _bearer("sk-not-the-key"))
    assert (wrong.status_code, wrong.json()) == (401, WRONG_KEY)
    wait_for(lambda: QWEN in _models(url, _bearer(MASTER_KEY)), 30, "the keyed gateway to list Qwen")
    assert _chat(url, QWEN, _bearer(MASTER_KEY)).status_code == 200
    assert _chat(url, QWEN, {"x-litellm-api-key": MASTER_KEY}).status_code == 200
    # A Berth caller the endpoint proxy vouches for needs no key; a key sent then decides alone.
    token = _bearer(stack.token_for(world["keyed"]["id"]))
    assert _chat(url, QWEN, token).status_code == 200
    stale = _chat(url, QWEN, {**token, "x-litellm-api-key": "sk-stale"})
    assert (stale.status_code, stale.json()) == (401, WRONG_KEY)
    # The key never shows in the workflow definition, the service's log or its command line.
    assert MASTER_KEY not in stack.cli("workflow", "get", world["keyed_id"]).stdout
    assert MASTER_KEY not in stack.cli("workflow", "log", world["keyed_id"]).stdout


def test_generated_master_key_is_in_the_definition_and_works(world: dict[str, Any]) -> None:
    stack, endpoint = world["stack"], world["generated"]
    definition = stack.cli("workflow", "get", world["generated_id"]).stdout
    key = next(word.strip('",') for word in definition.split() if word.strip('",').startswith("sk-berth-"))
    token = _bearer(stack.token_for(endpoint["id"]))
    wait_for(lambda: QWEN in _models(endpoint["url"], token), 30, "the gateway to list Qwen")
    assert _chat(endpoint["url"], QWEN, {**token, "x-litellm-api-key": key}).status_code == 200
    wrong = _chat(endpoint["url"], QWEN, {**token, "x-litellm-api-key": key + "x"})
    assert (wrong.status_code, wrong.json()) == (401, WRONG_KEY)


def test_unknown_model_and_listing_have_litellm_shapes(world: dict[str, Any]) -> None:
    url = world["keyed"]["url"]
    wait_for(lambda: QWEN in _models(url, _bearer(MASTER_KEY)), 30, "the keyed gateway to list Qwen")
    listing = httpx.get(url + "/v1/models", headers=_bearer(MASTER_KEY), timeout=10).json()
    cards = [{"id": model, "object": "model", "created": 1677610602, "owned_by": "openai"} for model in (QWEN, SLEEPER)]
    assert listing == {"data": cards, "object": "list"}
    unknown = _chat(url, "no/such-model", _bearer(MASTER_KEY))
    assert unknown.status_code == 400
    assert unknown.json() == {"error": {
        "message": "/chat/completions: Invalid model name passed in model=no/such-model. Call `/v1/models` to view "
                   "available models for your key.", "type": "invalid_request_error", "param": "model", "code": "400"}}


def test_routing_policy_is_the_gateways(world: dict[str, Any]) -> None:
    stack, qwen = world["stack"], world["qwen"]
    keyed, generated = world["keyed"]["url"], world["generated"]
    token = _bearer(stack.token_for(generated["id"]))
    wait_for(lambda: QWEN in _models(generated["url"], token), 30, "the gateway to list Qwen")
    # round_robin: sequential requests alternate between the two copies exactly.
    before = _served(stack, qwen)
    for _ in range(10):
        assert _chat(keyed, QWEN, _bearer(MASTER_KEY)).status_code == 200
    after = _served(stack, qwen)
    assert [b - a for a, b in zip(before, after, strict=True)] == [5, 5]
    # most_free_kv: idle copies tie on free KV and queue, so every sequential request goes to one copy
    # (the pools' own least_queue would spread them) — once the gateway's view of the queues is from after
    # the requests above ended (it is up to one scrape old: a busy machine showed a 3/7 split without this).
    wait_for(lambda: _idle(stack, qwen), 30, "Qwen's copies to be idle")
    idle_at, service = time.time(), _service_url(stack, generated["id"])
    wait_for(lambda: (httpx.get(service + "/health", timeout=10).json()["scrape"]["last_round_started_at"] or 0)
             > idle_at, 30, "the most_free_kv gateway to scrape the idle copies")
    before = _served(stack, qwen)
    for _ in range(10):
        assert _chat(generated["url"], QWEN, token).status_code == 200
    after = _served(stack, qwen)
    assert sorted(b - a for a, b in zip(before, after, strict=True)) == [0, 10]


def test_discovery_interval_sets_how_fast_a_new_pool_is_routable(world: dict[str, Any]) -> None:
    stack, keyed, slow = world["stack"], world["keyed"]["url"], world["generated"]
    slow_token = _bearer(stack.token_for(slow["id"]))
    gpt = stack.start_entry("GPT-OSS 20B", "Proxy=false")
    ready_at = time.monotonic()
    wait_for(lambda: GPT in _models(keyed, _bearer(MASTER_KEY)), 10, "the 1 s gateway to discover the new pool")
    assert time.monotonic() - ready_at < 1 + 3  # DiscoveryInterval=1, plus a poll's and a scrape's time
    assert _chat(keyed, GPT, _bearer(MASTER_KEY)).status_code == 200
    # DiscoveryInterval=120: the new pool is not seen for a while (a fixed 2 s poll would have found it).
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert GPT not in _models(slow["url"], slow_token)
        time.sleep(0.5)
    stack.cli("workflow", "stop", gpt)


def test_a_long_discovery_interval_still_wakes_a_pool_at_zero(world: dict[str, Any]) -> None:
    stack, sleeper, slow = world["stack"], world["sleeper"], world["generated"]
    token = {**_bearer(stack.token_for(slow["id"])), "x-request-timeout": "20"}
    wait_for(lambda: SLEEPER in _models(slow["url"], token), 30, "the gateway to list the pool")
    stack.cli("workflow", "scale", sleeper, "--replicas", "0")
    stack.wait_phase(sleeper, {"scaled_to_zero"}, timeout=60)
    # DiscoveryInterval=120 has not told the gateway the copies left: its first answers may be 502s
    # (a copy gone) until a failed scrape sets them aside; then it wakes the pool and polls while it waits.
    woken = wait_for(lambda: _chat(slow["url"], SLEEPER, token).status_code == 200, 110, "the woken pool to answer")
    assert woken


@pytest.mark.parametrize("values", ["MinReplicas=2", "MaxReplicas=3", "Image=ghcr.io/berriai/litellm:main-stable"])
def test_sizes_and_image_other_than_the_one_process_are_refused(world: dict[str, Any], values: str) -> None:
    stack = world["stack"]
    name, value = values.split("=", 1)
    response = stack.api("POST", "/v1/workflows", json={"entry": "LiteLLM Model Gateway", "values": {name: value}})
    assert response.status_code == 400, response.text
    if name == "Image":
        assert "Leave Image empty" in response.text
    else:
        assert f"{name}={value} is above its maximum 1" in response.text
