"""Service entries run by the generic workflow through the node service runner: the "LiteLLM Model
Gateway" (the discovering gateway as a workflow with its own endpoint) and "OpenCode" (`opencode serve`
reached over its HTTP API with its generated password)."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.opencode_support import run_opencode
from tests.support import REPO, RunningStack, free_port_base, wait_for

OPENCODE = REPO / ".tools" / "opencode" / "node_modules" / ".bin" / "opencode"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("service-entries")) / "state"
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="4x80GB").start()
    try:
        yield running
    finally:
        running.stop()


def test_gateway_entry_serves_every_discoverable_model(stack: RunningStack) -> None:
    gpt = stack.start_entry("GPT-OSS 20B", "Proxy=false")
    qwen = stack.start_entry("vLLM", "Model=hf://Qwen/Qwen3-0.6B,Proxy=false")
    gateway = stack.start_entry("LiteLLM Model Gateway")
    endpoint = stack.endpoint(gateway)
    assert endpoint["service"] == "gateway"
    headers = {"Authorization": f"Bearer {stack.token_for(endpoint['id'])}"}
    models: set[str] = set()
    for _ in range(40):
        listing = httpx.get(endpoint["url"] + "/v1/models", headers=headers, timeout=10).json()["data"]
        models = {m["id"] for m in listing}
        if models == {"openai/gpt-oss-20b", "Qwen/Qwen3-0.6B"}:
            break
        time.sleep(0.5)
    assert models == {"openai/gpt-oss-20b", "Qwen/Qwen3-0.6B"}
    for model in sorted(models):
        reply = httpx.post(endpoint["url"] + "/v1/chat/completions", headers=headers, timeout=30,
                           json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200, reply.text
    assert "gateway" in stack.cli("workflow", "log", gateway).stdout
    for workflow_id in (gateway, gpt, qwen):
        stack.cli("workflow", "stop", workflow_id)


def test_opencode_entry_with_password_and_bad_endpoint(stack: RunningStack) -> None:
    if not OPENCODE.exists():
        pytest.fail("the OpenCode binary is not installed: run `make opencode` (make test does)")
    model = stack.start_entry("GPT-OSS 20B", "Proxy=false")
    model_endpoint = stack.endpoint(model)
    opencode = stack.start_entry(
        "OpenCode", f"Endpoint={model_endpoint['url']},Model=openai/gpt-oss-20b,ServiceScope=public")
    show = stack.cli("workflow", "log", opencode, "show-server").stdout
    password = re.search(r"password: (\S+)", show)
    assert password and "opencode attach" in show and "lapses" in show
    definition = stack.cli("workflow", "get", opencode).stdout
    assert password.group(1) in definition  # the documents: the password sits in the definition
    endpoint = stack.endpoint(opencode)
    assert endpoint["service"] == "opencode" and endpoint["scope"] == "public"
    anonymous = httpx.get(endpoint["url"] + "/session", timeout=10)
    assert anonymous.status_code == 401
    wrong = httpx.get(endpoint["url"] + "/session", timeout=10,
                      headers={"Authorization": "Basic " + base64.b64encode(b"opencode:wrong").decode()})
    assert wrong.status_code == 401
    basic = "Basic " + base64.b64encode(f"opencode:{password.group(1)}".encode()).decode()
    sessions = httpx.get(endpoint["url"] + "/session", timeout=10, headers={"Authorization": basic})
    assert sessions.status_code == 200, sessions.text
    config = httpx.get(endpoint["url"] + "/config", timeout=10, headers={"Authorization": basic}).json()
    assert "openai/gpt-oss-20b" in str(config)
    # A prompt over OpenCode's HTTP API, through its Berth endpoint: OpenCode calls the model endpoint
    # with the token the workflow minted for its owner, and the model answers.
    session = httpx.post(endpoint["url"] + "/session", headers={"Authorization": basic}, json={}, timeout=30)
    assert session.status_code == 200, session.text
    prompt = {"parts": [{"type": "text", "text": "Reply with the single word: ready"}]}
    reply = httpx.post(endpoint["url"] + f"/session/{session.json()['id']}/message",
                       headers={"Authorization": basic}, json=prompt, timeout=180).json()
    assert reply["info"]["role"] == "assistant" and "error" not in reply["info"], reply["info"].get("error")
    assert any(p.get("type") == "text" and p.get("text") for p in reply["parts"]), reply["parts"]
    # `opencode run --attach` (attach's non-interactive form) through the same Berth URL.
    attached = run_opencode(stack.state_dir.parent / "client", {}, [
        "run", "--attach", endpoint["url"], "-p", password.group(1), "Reply with the single word: ready"], {})
    assert attached.returncode == 0, attached.stdout + attached.stderr
    listed = httpx.get(endpoint["url"] + "/session", timeout=10, headers={"Authorization": basic}).json()
    assert len(listed) == 2
    note = stack.describe(opencode)["endpoint"]["note"]
    assert "lapses at" in note and "restart the workflow to renew it" in note
    ephemeral = stack.state_dir / "volumes" / "ephemeral" / opencode / "workspace"
    assert ephemeral.is_dir()
    stack.cli("workflow", "stop", opencode)
    assert not ephemeral.exists()  # no Volume: the workspace goes with the workflow
    # No Endpoint: every model endpoint the owner may reach is registered (discovery), each provider
    # with a token bound to its own endpoint (the endpoint proxy refuses another endpoint's token).
    second = stack.start_entry("vLLM", "Model=hf://Qwen/Qwen3-0.6B,Proxy=false")
    second_endpoint = stack.endpoint(second)
    discovered = stack.start_entry("OpenCode", "ServiceScope=public,Volume=my-workspace")
    config = httpx.get(stack.endpoint(discovered)["url"] + "/config", timeout=10, headers={
        "Authorization": "Basic " + base64.b64encode(
            f"opencode:{_password(stack, discovered)}".encode()).decode()}).json()
    providers = {p["options"]["baseURL"].removesuffix("/v1"): p for p in config["provider"].values()}
    assert set(providers) == {model_endpoint["url"], second_endpoint["url"]}
    for endpoint_info in (model_endpoint, second_endpoint):
        token = providers[endpoint_info["url"]]["options"]["apiKey"]  # /config shows what {env:…} became
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        assert claims["aud"] == f"endpoint:{endpoint_info['id']}"
    stack.cli("workflow", "stop", discovered)
    stack.cli("workflow", "stop", second)
    assert (stack.state_dir / "volumes" / "persistent" / "my-workspace" / "workspace").is_dir()
    # An Endpoint the workflow cannot reach: the workflow fails and says which and why.
    bad = stack.start_entry("OpenCode", "Endpoint=http://127.0.0.1:9/v1,ServiceScope=public", watch=False)
    info = stack.wait_phase(bad, {"failed"}, timeout=60)
    assert "127.0.0.1:9" in info["last_error"]
    stack.cli("workflow", "stop", model)


def _password(stack: RunningStack, workflow_id: str) -> str:
    found = re.search(r"password: (\S+)", stack.cli("workflow", "log", workflow_id, "show-server").stdout)
    assert found, "show-server prints the OpenCode password"
    return found.group(1)


def test_opencode_with_an_api_key_prints_its_plain_url_and_no_lapse(stack: RunningStack) -> None:
    """Issue 13 item 7: OpenCode's endpoint is no OpenAI API, so `Ready.` and describe print it without
    /v1; with EndpointAuth=api-key no Berth token is minted, so show-server promises no lapse or renewal."""
    if not OPENCODE.exists():
        pytest.fail("the OpenCode binary is not installed: run `make opencode` (make test does)")
    wide = dict(stack.env, COLUMNS="400")  # Rich wraps at the terminal's width
    stack.cli("secret", "create", "secret://user/opencode-key", input="sk-opencode-0123456789abcdef")
    model = stack.start_entry("GPT-OSS 20B", "Scope=public,ApiKeySecret=secret://user/opencode-key")
    model_endpoint = stack.endpoint(model)
    started = stack.cli("workflow", "catalog", "start", "OpenCode", "--watch", "--values",
                        f"Endpoint={model_endpoint['url']},EndpointAuth=api-key,"
                        "ApiKeySecret=secret://user/opencode-key,ServiceScope=public", timeout=600, env=wide)
    opencode = started.stdout.strip().splitlines()[0]
    endpoint = stack.endpoint(opencode)
    assert f"Ready. Endpoint: {endpoint['url']} (ID {endpoint['id']})" in started.stdout
    assert f"Endpoint {endpoint['id']}: {endpoint['url']}\n" in stack.cli("workflow", "describe", opencode,
                                                                         env=wide).stdout
    # A model endpoint is an OpenAI API: still printed as its /v1 base URL.
    assert f"{model_endpoint['url']}/v1\n" in stack.cli("workflow", "describe", model, env=wide).stdout
    show = stack.cli("workflow", "log", opencode, "show-server").stdout
    assert "models reached with the LiteLLM key from ApiKeySecret: no Berth token, nothing lapses" in show
    assert "lapses:" not in show and "renew" not in show and "n/a" not in show
    for workflow_id in (opencode, model):
        stack.cli("workflow", "stop", workflow_id)


def test_workflow_list_shows_the_phase(stack: RunningStack) -> None:
    """Issue 13 item 7: a stopped workflow is listed as `stopped` (its phase), not Temporal's `completed`."""
    workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false")

    def listed() -> dict[str, Any]:
        return next(row for row in stack.cli_json("workflow", "list") if row["id"] == workflow_id)

    assert (listed()["phase"], listed()["status"]) == ("ready", "running")
    stack.cli("workflow", "stop", workflow_id)
    def closed() -> dict[str, Any] | None:
        row = listed()
        return row if row["status"] != "running" else None

    row = wait_for(closed, 60, "the workflow to close after its stop")
    assert (row["phase"], row["status"]) == ("stopped", "completed")
    table = stack.cli("workflow", "list", env=dict(stack.env, COLUMNS="400")).stdout
    line = next(text for text in table.splitlines() if workflow_id in text)
    assert "stopped" in line and "completed" not in line and "PHASE" in table
