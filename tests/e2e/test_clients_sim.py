"""Real clients against a simulator-backed Berth endpoint with tool calling on: the OpenAI SDK's tool calls
and exceptions, `berth endpoint opencode-config`, the real OpenCode binary (run, serve, attach) and the
OpenCode entry's submission checks and endpoint pre-flight."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from berth.opencode import (
    EndpointUnreachableError,
    ProviderTarget,
    basic_credentials,
    generate_password,
    opencode_config,
    preflight,
    render_serve,
)
from tests.e2e.opencode_support import require_opencode, run_opencode, serving
from tests.support import RunningStack

pytestmark = pytest.mark.litellm  # starts the real LiteLLM proxy

MODEL = "openai/gpt-oss-20b"
CONTEXT = 32768


@pytest.fixture(scope="module")
def tools_endpoint(sim_stack: RunningStack) -> dict[str, str]:
    workflow_id = sim_stack.start_entry(
        "GPT-OSS 20B",
        f"MaxContextSize={CONTEXT},ExtraArgs='--enable-auto-tool-choice --tool-call-parser hermes'")
    endpoint = sim_stack.endpoint(workflow_id)
    return {"workflow_id": workflow_id, "id": endpoint["id"], "url": endpoint["url"],
            "token": sim_stack.token_for(endpoint["id"], "1h")}


def _client(endpoint: dict[str, str], token: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=token or endpoint["token"], max_retries=0)


WEATHER_TOOL: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_sdk_tool_calls(tools_endpoint: dict[str, str]) -> None:
    reply = _client(tools_endpoint).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL],
        max_tokens=64)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert calls and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert "city" in json.loads(calls[0].function.arguments)  # type: ignore[union-attr]


def test_sdk_errors_are_the_sdks_exceptions(tools_endpoint: dict[str, str]) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    client = _client(tools_endpoint)
    with pytest.raises(openai.AuthenticationError):
        _client(tools_endpoint, token="not-a-token").models.list()
    # Behind the model's LiteLLM proxy (Proxy=true), an unknown model is LiteLLM's documented 400.
    with pytest.raises(openai.BadRequestError, match="Invalid model name"):
        client.chat.completions.create(model="no/such-model", messages=messages, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=CONTEXT + 1)


def test_opencode_config_command(sim_stack: RunningStack, tools_endpoint: dict[str, str]) -> None:
    result = sim_stack.cli("endpoint", "opencode-config", tools_endpoint["id"])
    config = json.loads(result.stdout)
    provider = config["provider"]["berth"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": tools_endpoint["url"] + "/v1", "apiKey": "{env:BERTH_TOKEN}"}
    limit = {"context": CONTEXT, "output": 8192}
    assert provider["models"] == {MODEL: {"name": f"{MODEL} on Berth", "limit": limit}}
    assert config["model"] == f"berth/{MODEL}"
    assert "generate-token" in result.stderr and "without --enable-auto-tool-choice" not in result.stderr
    other = json.loads(sim_stack.cli("endpoint", "opencode-config", tools_endpoint["id"], "--provider",
                                     "cluster", "--output-limit", "1024", "--no-verify").stdout)
    assert other["model"] == f"cluster/{MODEL}"
    assert other["provider"]["cluster"]["models"][MODEL]["limit"] == {"context": CONTEXT, "output": 1024}
    bad = sim_stack.cli("endpoint", "opencode-config", "ep-nosuch", check=False)
    assert bad.returncode != 0 and "ep-nosuch" in bad.stderr


def test_real_opencode_models_and_run(sim_stack: RunningStack, tools_endpoint: dict[str, str],
                                      tmp_path: Path) -> None:
    require_opencode()
    config = json.loads(sim_stack.cli("endpoint", "opencode-config", tools_endpoint["id"]).stdout)
    env = {"BERTH_TOKEN": tools_endpoint["token"]}
    models = run_opencode(tmp_path / "project", config, ["models", "berth"], env)
    assert models.returncode == 0, models.stderr
    assert f"berth/{MODEL}" in models.stdout.split()
    run = run_opencode(tmp_path / "project", config,
                       ["run", "--model", f"berth/{MODEL}", "Reply with the single word: ready"], env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Simulated reply" in run.stdout  # the simulator's answer once the tool result came back


def test_opencode_serve_password_and_http_api(sim_stack: RunningStack, tools_endpoint: dict[str, str],
                                              tmp_path: Path) -> None:
    binary = require_opencode()
    config = opencode_config({"berth": ProviderTarget(url=tools_endpoint["url"], model_ids=(MODEL,),
                                                      max_context=CONTEXT)}, MODEL, offline=True)
    password = generate_password()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = render_serve(config, password, host="127.0.0.1", port=port, data_dir=tmp_path / "data",
                           token=tools_endpoint["token"], binary=binary)
    assert tools_endpoint["token"] not in command.config_path.read_text()  # the token travels in the env only
    with serving(command, tmp_path / "serve.log") as url:
        assert httpx.get(url + "/session", timeout=10).status_code == 401
        wrong = httpx.get(url + "/session", headers={"Authorization": basic_credentials("wrong")}, timeout=10)
        assert wrong.status_code == 401
        auth = {"Authorization": basic_credentials(password)}
        assert httpx.get(url + "/config", headers=auth, timeout=10).json()["model"] == f"berth/{MODEL}"
        session = httpx.post(url + "/session", headers=auth, json={}, timeout=30).json()
        prompt = {"parts": [{"type": "text", "text": "Reply with the single word: ready"}]}
        reply = httpx.post(url + f"/session/{session['id']}/message", headers=auth, timeout=180,
                           json=prompt).json()
        assert reply["info"]["role"] == "assistant" and "error" not in reply["info"], reply["info"]
        assert any(p.get("type") == "text" and p.get("text") for p in reply["parts"]), reply["parts"]
        sessions = httpx.get(url + "/session", headers=auth, timeout=10).json()
        assert [s["id"] for s in sessions] == [session["id"]]
        # `opencode attach` is a TUI; `opencode run --attach` is its non-interactive form.
        attached = run_opencode(tmp_path / "client", {}, ["run", "--attach", url, "-p", password,
                                                          "Reply with the single word: ready"], {})
        assert attached.returncode == 0, attached.stdout + attached.stderr
        # Its printed reply is not reliable when attached (sometimes empty); the server's sessions are.
        assert len(httpx.get(url + "/session", headers=auth, timeout=10).json()) == 2
        refused = run_opencode(tmp_path / "client", {}, ["run", "--attach", url, "-p", "wrong", "hello"], {},
                               timeout=60)
        assert refused.returncode != 0 or "Simulated reply" not in refused.stdout


def test_opencode_entry_refuses_a_context_larger_than_the_models(sim_stack: RunningStack,
                                                                 tools_endpoint: dict[str, str]) -> None:
    too_big = sim_stack.cli("workflow", "catalog", "start", "OpenCode", "--values",
                            f"Endpoint={tools_endpoint['url']},MaxContextSize={CONTEXT * 2}", check=False)
    assert too_big.returncode != 0
    assert f"MaxContextSize={CONTEXT * 2} is larger than endpoint {tools_endpoint['id']}" in too_big.stderr
    assert f"use MaxContextSize={CONTEXT} or less" in too_big.stderr
    by_model = sim_stack.cli("workflow", "catalog", "start", "OpenCode", "--values",
                             "Model=HuggingFaceTB/SmolLM2-135M-Instruct,MaxContextSize=16384", check=False)
    assert by_model.returncode != 0 and "(8192 tokens)" in by_model.stderr
    base = tools_endpoint["url"].rsplit("/endpoints/", 1)[0]
    unknown = sim_stack.cli("workflow", "catalog", "start", "OpenCode", "--values",
                            f"Endpoint={base}/endpoints/ep-gone", check=False)
    assert unknown.returncode != 0 and "no endpoint ep-gone" in unknown.stderr
    wrong_model = sim_stack.cli("workflow", "catalog", "start", "OpenCode", "--values",
                                f"Endpoint={tools_endpoint['url']},Model=Qwen/Qwen3-0.6B,MaxContextSize=8192",
                                check=False)
    assert wrong_model.returncode != 0 and f"serves {MODEL} only" in wrong_model.stderr


def test_preflight_says_which_endpoint_and_why(tools_endpoint: dict[str, str]) -> None:
    url = tools_endpoint["url"]
    assert asyncio.run(preflight(url, tools_endpoint["token"])) == (MODEL,)
    with pytest.raises(EndpointUnreachableError, match=f"Endpoint {url} answered 401.*has none"):
        asyncio.run(preflight(url))
    gone = url.rsplit("/", 1)[0] + "/ep-gone"
    with pytest.raises(EndpointUnreachableError, match=f"Endpoint {gone} answered 404"):
        asyncio.run(preflight(gone, tools_endpoint["token"]))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(EndpointUnreachableError, match=f"Endpoint {closed} is unreachable: cannot connect"):
        asyncio.run(preflight(closed))
