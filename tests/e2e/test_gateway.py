"""The discovering gateway (`berth gateway`) over three workflows of two models with different owners
and scopes: it serves exactly what its owner may reach, follows scaling and wakes a pool at zero."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.processes import stop_group_sync
from berth.security import Identity, SigningKey
from tests.support import RunningStack, free_port_base, start_gateway, wait_for

# alice's Proxy=true pool (the one the gateway must not discover) runs behind its LiteLLM proxy.
pytestmark = pytest.mark.litellm

ALICE = Identity("alice", ("team-a",), "acme")
BOB = Identity("bob", ("team-b",), "acme")
CAROL = Identity("carol", ("team-c",), "other")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    state = Path(tmp_path_factory.mktemp("gateway")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="8x80GB",
                         extra_env={"BERTH_SIM_TOKENS_PER_SECOND": "0"}).start()
    key = SigningKey.load_or_create(state / "keys")
    tokens = {who.user: key.api_token(who) for who in (ALICE, BOB, CAROL)}

    def start(who: Identity, entry: str, values: dict[str, str]) -> dict[str, str]:
        response = httpx.post(stack.info["api_url"] + "/v1/workflows", timeout=30,
                              headers={"Authorization": f"Bearer {tokens[who.user]}"},
                              json={"entry": entry, "values": values})
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    workflows = {
        "alice-gpt": start(ALICE, "GPT-OSS 20B", {"Proxy": "false", "Scope": "group", "MinReplicas": "0"}),
        "bob-qwen": start(BOB, "vLLM", {"Model": "hf://Qwen/Qwen3-0.6B", "Proxy": "false", "Scope": "organization",
                                        "MaxReplicas": "2"}),
        "carol-gpt": start(CAROL, "GPT-OSS 20B", {"Proxy": "false", "Scope": "user"}),
        "alice-proxied": start(ALICE, "vLLM", {"Model": "hf://Qwen/Qwen3-1.7B"}),
    }
    for created in workflows.values():
        stack.wait_phase(created["id"], {"ready"}, timeout=120)
    try:
        # As the catalog entry's node runs it: alice's token, and a token for the keys of her copies.
        gateway, url = start_gateway(stack, tokens["alice"], key.replica_keys_token(ALICE, 3600))
    except BaseException:
        stack.stop()
        raise
    try:
        yield {"stack": stack, "workflows": workflows, "url": url, "log": state / "gateway.log", "tokens": tokens}
    finally:
        stop_group_sync(gateway.pid, 10)
        stack.stop()


def _models(url: str) -> list[str]:
    return [m["id"] for m in httpx.get(url + "/v1/models", timeout=10).json()["data"]]


def _discovery(url: str) -> dict[str, Any]:
    discovery: dict[str, Any] = httpx.get(url + "/health", timeout=10).json()["discovery"]
    return discovery


def _chat(url: str, model: str, timeout: float = 30, prompt: str = "hi") -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=timeout,
                      json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": prompt}]})


def _served(stack: RunningStack, workflow_id: str) -> float:
    url = stack.describe(workflow_id)["replicas"][0]["url"]
    text = httpx.get(url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


def test_serves_exactly_what_its_owner_may_reach(world: dict[str, object]) -> None:
    url, stack = str(world["url"]), world["stack"]
    assert isinstance(stack, RunningStack)
    workflows = world["workflows"]
    assert isinstance(workflows, dict)
    # alice's own group pool and bob's organization pool; not carol's (user scope, other organization),
    # not alice's Proxy=true model (behind its LiteLLM proxy).
    wait_for(lambda: set(_models(url)) == {"openai/gpt-oss-20b", "Qwen/Qwen3-0.6B"}, 30,
             "the gateway to list exactly alice's and bob's models")
    carol_before = _served(stack, workflows["carol-gpt"]["id"])
    for _ in range(10):
        assert _chat(url, "openai/gpt-oss-20b").status_code == 200
        assert _chat(url, "Qwen/Qwen3-0.6B").status_code == 200
    assert _served(stack, workflows["carol-gpt"]["id"]) == carol_before, "routed to a pool alice may not reach"
    missing = _chat(url, "Qwen/Qwen3-1.7B")
    assert missing.status_code == 400 and "Proxy=false" in missing.json()["error"]["message"]
    assert missing.json()["error"]["message"].startswith("/chat/completions: Invalid model name passed in")
    assert "restart the model with Proxy=false" in Path(str(world["log"])).read_text()
    described = stack.cli("workflow", "describe", workflows["alice-proxied"]["id"]).stdout
    assert "not discoverable by a gateway" in described


def test_follows_scaling_and_wakes_a_pool_at_zero(world: dict[str, object]) -> None:
    url, stack = str(world["url"]), world["stack"]
    assert isinstance(stack, RunningStack)
    workflows = world["workflows"]
    assert isinstance(workflows, dict)
    bob = workflows["bob-qwen"]["id"]
    bob_token = world["tokens"]["bob"]  # type: ignore[index]
    httpx.post(stack.info["api_url"] + f"/v1/workflows/{bob}/scale", json={"replicas": 2}, timeout=30,
               headers={"Authorization": f"Bearer {bob_token}"}).raise_for_status()
    wait_for(lambda: len([r for r in stack.describe(bob)["replicas"] if r["status"] == "ready"]) == 2, 60,
             "bob's second copy ready")

    def served() -> list[float]:
        return [sum(float(line.rsplit(" ", 1)[1]) for line in stack.copy_metrics(r).splitlines()
                    if line.startswith("vllm:request_success_total"))
                for r in stack.describe(bob)["replicas"]]

    looks = iter(range(10_000))

    def both_copies_serve() -> bool:
        # Each look sends one more request: the gateway finds the new copy at its next discovery and scrape.
        # A new prompt each time: between idle copies the same prompt keeps its copy (prefix-cache affinity).
        assert _chat(url, "Qwen/Qwen3-0.6B", prompt=f"hi {next(looks)}").status_code == 200
        return all(count > 0 for count in served())

    wait_for(both_copies_serve, 30, "the gateway to send traffic to bob's new copy")
    alice = workflows["alice-gpt"]["id"]
    stack.cli("workflow", "scale", alice, "--replicas", "0")
    stack.wait_phase(alice, {"scaled_to_zero"}, timeout=60)
    # A discovery round that started after the pool emptied has dropped its stopped copy, so the request
    # below wakes the pool instead of going to that copy.
    emptied_at = time.time()
    wait_for(lambda: (_discovery(url)["last_round_started_at"] or 0) > emptied_at, 30,
             "a gateway discovery round to start after the pool scaled to zero")
    started = time.monotonic()
    woken = _chat(url, "openai/gpt-oss-20b", timeout=130)
    assert woken.status_code == 200, woken.text
    assert time.monotonic() - started < 60
