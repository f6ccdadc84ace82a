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

from activities.supervision import STOP_GRACE_S
from tests.e2e.opencode_support import run_opencode
from tests.support import REPO, RunningStack, free_port_base, runs_as_the_rank_user_seeing_no_key, wait_for

OPENCODE = REPO / ".tools" / "opencode" / "node_modules" / ".bin" / "opencode"


LITELLM_KEY = "sk-opencode-user-0123456789abcdef"
KEY_SECRET = "secret://user/opencode-litellm-key"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("service-entries")) / "state"
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="4x80GB").start()
    try:
        running.cli("secret", "create", KEY_SECRET, input=LITELLM_KEY)
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
    # It answers what strangers send through its endpoint: it runs jailed, as its workflow's rank user, as LiteLLM.
    record = next(stack.state_dir.glob(f"nodes/*/services/{gateway}.*/service.json"))
    runs_as_the_rank_user_seeing_no_key(json.loads(record.read_text())["pid"], stack.state_dir)
    for workflow_id in (gateway, gpt, qwen):
        stack.cli("workflow", "stop", workflow_id)


def test_gateway_traffic_keeps_a_scale_to_zero_pool_awake(stack: RunningStack) -> None:
    """A MinReplicas=0, Proxy=false pool used only through the gateway entry: its requests go straight
    to the copies, past the endpoint proxy, and must still count (issue 13 item 1). Once the load
    stops, the pool goes to zero within a bound."""
    gateway = stack.start_entry("LiteLLM Model Gateway", "DiscoveryInterval=1")
    entrance = stack.endpoint(gateway)
    headers = {"Authorization": f"Bearer {stack.token_for(entrance['id'])}"}
    pool = stack.start_entry("vLLM", "Model=hf://Qwen/Qwen3-0.6B,Proxy=false,MinReplicas=0,ScaleToZeroAfter=6")

    def chat() -> int:
        body = {"model": "Qwen/Qwen3-0.6B", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        return httpx.post(entrance["url"] + "/v1/chat/completions", headers=headers, json=body,
                          timeout=130).status_code

    def scale_downs() -> list[str]:
        return [e["message"] for e in stack.describe(pool)["events"] if e["kind"] == "scale_down"]

    wait_for(lambda: chat() == 200, 120, "the gateway serves the pool", every=0.5)
    # It may have gone to zero before the gateway discovered it (and been woken by it): count from here.
    before = len(scale_downs())
    started = time.monotonic()
    while time.monotonic() - started < 20:  # longer than 3 × ScaleToZeroAfter
        assert chat() == 200
        time.sleep(1.5)  # the load's pace, a request every ~1.5 s: not a synchronization
    assert scale_downs()[before:] == [], "a pool busy through the gateway was judged idle"
    assert stack.describe(pool)["desired_copies"] == 1
    stopped = time.monotonic()
    stack.wait_phase(pool, {"scaled_to_zero"}, timeout=40)
    assert time.monotonic() - stopped < 6 + 20, "idle, it should reach zero soon after ScaleToZeroAfter"
    assert "ScaleToZeroAfter=6" in scale_downs()[-1]
    for workflow_id in (pool, gateway):
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
    # A coding agent with a bash tool runs as the rank user, seeing none of the state dir's keys.
    record = next(stack.state_dir.glob(f"nodes/*/services/{opencode}.*/service.json"))
    pid = json.loads(record.read_text())["pid"]
    runs_as_the_rank_user_seeing_no_key(pid, stack.state_dir)
    assert not_writable_by(pid, record.parent / "opencode" / "home" / ".config" / "opencode")
    # Its config dir is not its own to write, so after the prompt above it forked no `npm install` (which hangs
    # offline and makes OpenCode deaf to SIGTERM): SIGTERM ends it, and the whole stop (CLI start and workflow
    # included) ends before the supervisor's grace alone would have, after which it sends SIGKILL.
    started = time.monotonic()
    stack.cli("workflow", "stop", opencode)
    assert time.monotonic() - started < STOP_GRACE_S
    assert not ephemeral.exists()  # no Volume: the workspace goes with the workflow
    # No Endpoint (seeds/001): every *gateway* endpoint the owner may reach is registered, not model
    # endpoints. With no gateway running the workflow fails and says what to do.
    wait_for(lambda: not any(r["service"] == "gateway" for r in stack.api("GET", "/v1/endpoints").json()), 60,
             "the earlier tests' gateways are gone")
    lonely = stack.start_entry("OpenCode", "ServiceScope=public", watch=False)
    info = stack.wait_phase(lonely, {"failed"}, timeout=60)
    assert "no endpoint to use" in info["last_error"] and "LiteLLM Model Gateway" in info["last_error"]
    gateway = stack.start_entry("LiteLLM Model Gateway", "DiscoveryInterval=1")
    gateway_endpoint = stack.endpoint(gateway)
    discovered = stack.start_entry("OpenCode", f"ServiceScope=public,Volume=my-workspace,ApiKeySecret={KEY_SECRET}")
    config = _opencode_config(stack, discovered)
    providers = {p["options"]["baseURL"].removesuffix("/v1"): p for p in config["provider"].values()}
    assert set(providers) == {gateway_endpoint["url"]}, "model endpoints are reached only by pinning one"
    # The token OpenCode sends is bound to the gateway's endpoint (the proxy refuses another's).
    token = providers[gateway_endpoint["url"]]["options"]["apiKey"]  # /config shows what {env:…} became
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["aud"] == f"endpoint:{gateway_endpoint['id']}"
    assert "openai/gpt-oss-20b" in providers[gateway_endpoint["url"]]["models"]
    # Issue 31: a gateway's model gets its own pool's MaxContextSize (GPT-OSS 20B's default, 131072), not the
    # OpenCode entry's (32768), and the reply a quarter of it, at most 8192.
    limit = providers[gateway_endpoint["url"]]["models"]["openai/gpt-oss-20b"]["limit"]
    assert limit == {"context": 131072, "output": 8192}, limit
    # The gateway admits OpenCode by the proxy's caller assertion (its own MasterKeySecret is another key):
    # ApiKeySecret, the owner's LiteLLM key, is added only towards a LiteLLM endpoint.
    assert "headers" not in providers[gateway_endpoint["url"]]["options"]
    assert LITELLM_KEY not in json.dumps(config)
    stack.cli("workflow", "stop", discovered)
    stack.cli("workflow", "stop", gateway)
    assert (stack.state_dir / "volumes" / "persistent" / "my-workspace" / "workspace").is_dir()
    # An Endpoint the workflow cannot reach: the workflow fails and says which and why.
    bad = stack.start_entry("OpenCode", "Endpoint=http://127.0.0.1:9/v1,ServiceScope=public", watch=False)
    info = stack.wait_phase(bad, {"failed"}, timeout=60)
    assert "127.0.0.1:9" in info["last_error"]
    stack.cli("workflow", "stop", model)


def not_writable_by(pid: int, directory: Path) -> bool:
    """Whether the process `pid`'s user may not write `directory` (by its owner's, or group's and others', bits)."""
    uid = int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("Uid:")).split()[1])
    mode = directory.stat()
    return uid != 0 and not mode.st_mode & (0o200 if mode.st_uid == uid else 0o022)


@pytest.mark.litellm
def test_opencode_api_key_secret_rides_beside_the_token(stack: RunningStack) -> None:
    """seeds/001: ApiKeySecret without EndpointAuth=api-key keeps the Berth token (for the endpoint
    proxy) and adds the key in `x-litellm-api-key` (for LiteLLM behind it); the key then decides."""
    key = LITELLM_KEY
    model = stack.start_entry("vLLM", f"Model=hf://Qwen/Qwen3-0.6B,ApiKeySecret={KEY_SECRET}")
    model_endpoint = stack.endpoint(model)
    assert model_endpoint["service"] == "litellm"
    opencode = stack.start_entry("OpenCode", f"Endpoint={model_endpoint['url']},ServiceScope=public,"
                                             f"MaxContextSize=8192,ApiKeySecret={KEY_SECRET}")
    (provider,) = _opencode_config(stack, opencode)["provider"].values()
    options = provider["options"]
    claims = json.loads(base64.urlsafe_b64decode(options["apiKey"].split(".")[1] + "=="))
    assert claims["aud"] == f"endpoint:{model_endpoint['id']}"
    assert options["headers"] == {"x-litellm-api-key": key}
    # A request with exactly those headers reaches the model; a wrong key there is refused by LiteLLM,
    # so the header does travel past the endpoint proxy and decides.
    body = {"model": "Qwen/Qwen3-0.6B", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    url = options["baseURL"] + "/chat/completions"
    sent = {"Authorization": f"Bearer {options['apiKey']}", **options["headers"]}
    reply = httpx.post(url, headers=sent, json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    wrong = httpx.post(url, headers={**sent, "x-litellm-api-key": "sk-wrong"}, json=body, timeout=60)
    assert wrong.status_code == 401 and "Invalid proxy server token" in wrong.text
    # The key is in no argv nor the definition: only the process environment OpenCode reads {env:…} from.
    assert key not in stack.cli("workflow", "get", opencode).stdout
    stack.cli("workflow", "stop", opencode)
    stack.cli("workflow", "stop", model)


def _opencode_config(stack: RunningStack, workflow_id: str) -> dict[str, Any]:
    """The configuration the OpenCode service runs with, as its own /config reports it."""
    basic = base64.b64encode(f"opencode:{_password(stack, workflow_id)}".encode()).decode()
    response = httpx.get(stack.endpoint(workflow_id)["url"] + "/config", timeout=10,
                         headers={"Authorization": f"Basic {basic}"})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def _password(stack: RunningStack, workflow_id: str) -> str:
    found = re.search(r"password: (\S+)", stack.cli("workflow", "log", workflow_id, "show-server").stdout)
    assert found, "show-server prints the OpenCode password"
    return found.group(1)


@pytest.mark.litellm
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
