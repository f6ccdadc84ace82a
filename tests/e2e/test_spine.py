"""The spine end to end on a real embedded stack (Temporal dev server, API, worker, simulated-GPU
node agents, endpoint proxy), driven through the real CLI and the OpenAI SDK."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.support import RunningStack, runs_as_the_rank_user_seeing_no_key


@pytest.fixture(scope="module")
def served(sim_stack: RunningStack) -> dict[str, str]:
    workflow_id = sim_stack.start_entry("GPT-OSS 20B")
    endpoint = sim_stack.endpoint(workflow_id)
    token = sim_stack.token_for(endpoint["id"], "8h")
    return {"workflow_id": workflow_id, "endpoint_id": endpoint["id"], "url": endpoint["url"], "token": token}


def test_catalog_list_table_and_json(sim_stack: RunningStack) -> None:
    table = sim_stack.cli("workflow", "catalog", "list").stdout
    assert "GPT-OSS 20B" in table and "vLLM" in table
    entries = sim_stack.cli_json("catalog", "list")  # the alias
    names = {e["name"] for e in entries}
    assert {"GPT-OSS 20B", "vLLM"} <= names
    assert all(e["category"] == "ML_AND_AI" for e in entries)


@pytest.mark.litellm
def test_endpoint_listing_has_the_contract_fields(sim_stack: RunningStack, served: dict[str, str]) -> None:
    rows = sim_stack.cli_json("workflow", "endpoints", "list")
    row = next(r for r in rows if r["id"] == served["endpoint_id"])
    assert {"id", "workflow_id", "service", "url", "scope", "ready"} <= set(row)
    assert row["ready"] is True and row["scope"] == "group"
    assert row["url"].endswith(f"/endpoints/{served['endpoint_id']}")


@pytest.mark.litellm
def test_openai_sdk_chat_streamed_and_not(served: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=served["url"] + "/v1", api_key=served["token"], max_retries=0)
    models = client.models.list()
    assert [m.id for m in models.data] == ["openai/gpt-oss-20b"]
    reply = client.chat.completions.create(
        model="openai/gpt-oss-20b", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=32,
    )
    assert "Paris" in (reply.choices[0].message.content or "")
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    chunks = list(client.chat.completions.create(
        model="openai/gpt-oss-20b", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=32, stream=True,
    ))
    text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    assert len(chunks) > 3 and "Paris" in text
    completion = client.completions.create(model="openai/gpt-oss-20b", prompt="Hello", max_tokens=8)
    assert completion.choices[0].text


@pytest.mark.litellm
def test_proxy_streams_chunk_by_chunk(served: dict[str, str]) -> None:
    """The first SSE chunk reaches the client long before the last one is generated (no buffering)."""
    body = {"model": "openai/gpt-oss-20b", "messages": [{"role": "user", "content": "Tell me a long story"}],
            "max_tokens": 200, "stream": True}
    arrivals = []
    with httpx.stream("POST", served["url"] + "/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {served['token']}"}) as response:
        assert response.status_code == 200
        started = time.monotonic()
        for line in response.iter_lines():
            if line.startswith("data:"):
                arrivals.append(time.monotonic() - started)
    assert len(arrivals) >= 5
    # Tokens come at the simulator's 200 tokens/s (5 ms apart): buffering would bunch them at the end.
    assert arrivals[0] < arrivals[-1] / 2


@pytest.mark.litellm
def test_the_audit_chain_records_proxied_requests(sim_stack: RunningStack, served: dict[str, str]) -> None:
    """Through the real proxy of a real stack: a served and a refused request reach the store as ATTEMPT
    and SUCCESS / FAILED rows (the proxy's background writer posts them), without the prompt."""
    prompt = "audit-me-not-a-word-of-this-prompt"
    body = {"model": "openai/gpt-oss-20b", "messages": [{"role": "user", "content": prompt}], "max_tokens": 4}
    served_answer = httpx.post(served["url"] + "/v1/chat/completions", json=body, timeout=30,
                               headers={"Authorization": f"Bearer {served['token']}"})
    refused = httpx.post(served["url"] + "/v1/chat/completions", json=body, timeout=30)
    assert (served_answer.status_code, refused.status_code) == (200, 401)
    deadline = time.monotonic() + 30
    while True:
        rows = sim_stack.cli_json("audit", "list", "--endpoint", served["endpoint_id"], "--limit", "1000")
        outcomes = {(r["phase"], r["status"]) for r in rows}
        if {("SUCCESS", 200), ("FAILED", 401)} <= outcomes:
            break
        assert time.monotonic() < deadline, f"no audit rows for both requests: {sorted(outcomes)}"
        time.sleep(0.2)
    assert prompt not in str(rows) and served["token"] not in str(rows)
    assert "verified" in sim_stack.cli("audit", "verify").stdout


@pytest.mark.parametrize("case", ["missing", "garbage", "other-endpoint", "expired", "api-token"])
@pytest.mark.litellm
def test_bad_tokens_get_plain_401(sim_stack: RunningStack, served: dict[str, str], case: str) -> None:
    headers = {}
    if case == "garbage":
        headers["Authorization"] = "Bearer not-a-token"
    elif case == "other-endpoint":
        from berth.security import Identity, SigningKey

        key = SigningKey.load_or_create(sim_stack.state_dir / "keys")
        headers["Authorization"] = "Bearer " + key.endpoint_token(Identity("admin", ("default",), "default"),
                                                                  "ep-someother", 3600)
    elif case == "expired":
        from berth.security import Identity, SigningKey

        key = SigningKey.load_or_create(sim_stack.state_dir / "keys")
        headers["Authorization"] = "Bearer " + key.endpoint_token(Identity("admin", ("default",), "default"),
                                                                  served["endpoint_id"], -10)
    elif case == "api-token":
        headers["Authorization"] = f"Bearer {sim_stack.token}"  # a control-plane token is not an endpoint token
    response = httpx.get(served["url"] + "/v1/models", headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.text == "Unauthorized"
    assert response.headers["content-type"].startswith("text/plain")


@pytest.mark.litellm
def test_describe_get_and_log(sim_stack: RunningStack, served: dict[str, str]) -> None:
    info = sim_stack.describe(served["workflow_id"])
    assert info["phase"] == "ready"
    assert [r["status"] for r in info["copies"]] == ["ready"]
    assert info["replicas"] == info["copies"]  # the old name, answered too for one release
    shown = sim_stack.cli_json("workflow", "describe", served["workflow_id"])  # `-o json`: both names
    assert shown["copies"] == shown["replicas"] and shown["desired_copies"] == shown["desired_replicas"]
    kinds = [e["kind"] for e in info["events"]]
    assert kinds[:2] == ["submitted", "downloading"] and "copy_ready" in kinds
    text = sim_stack.cli("workflow", "describe", served["workflow_id"]).stdout
    assert "ready" in text and served["endpoint_id"] in text
    definition = sim_stack.cli("workflow", "get", served["workflow_id"]).stdout
    assert "openai/gpt-oss-20b" in definition and "sk-berth-" in definition
    jobs = sim_stack.cli("workflow", "log", served["workflow_id"]).stdout
    assert "vllm-rank-0" in jobs
    log = sim_stack.cli("workflow", "log", served["workflow_id"], "vllm-rank-0").stdout
    assert "--served-model-name openai/gpt-oss-20b" in log


@pytest.mark.litellm
def test_the_pools_litellm_runs_as_a_rank_user_seeing_no_key(sim_stack: RunningStack, served: dict[str, str]) -> None:
    """LiteLLM parses what strangers send through the endpoint: it runs jailed, as its workflow's rank user
    (activities/launches.py `litellm_front`), forked from the node's standby or started cold."""
    records = [json.loads(path.read_text())
               for path in sim_stack.state_dir.glob(f"nodes/*/services/{served['workflow_id']}.*/service.json")]
    assert len(records) == 1, records  # the pool's one front: its LiteLLM
    runs_as_the_rank_user_seeing_no_key(records[0]["pid"], sim_stack.state_dir)


@pytest.mark.litellm
def test_workflow_list(sim_stack: RunningStack, served: dict[str, str]) -> None:
    rows = sim_stack.cli_json("workflow", "list")
    row = next(r for r in rows if r["id"] == served["workflow_id"])
    assert row["status"] == "running" and row["entry"] == "GPT-OSS 20B"


@pytest.mark.litellm
def test_stop_frees_everything(sim_stack: RunningStack) -> None:
    workflow_id = sim_stack.start_entry("vLLM", "Model=hf://Qwen/Qwen3-0.6B,GpusPerNode=4,Proxy=false")
    endpoint = sim_stack.endpoint(workflow_id)
    nodes = sim_stack.cli_json("node", "list")
    held = [g for n in nodes for g in n["gpus"] if g["allocated_to"] and g["allocated_to"].startswith(workflow_id)]
    assert len(held) == 4
    sim_stack.cli("workflow", "stop", workflow_id)
    info = sim_stack.describe(workflow_id)
    assert info["phase"] == "stopped" and info["status"] == "completed"
    nodes = sim_stack.cli_json("node", "list")
    assert not [g for n in nodes for g in n["gpus"] if (g["allocated_to"] or "").startswith(workflow_id)]
    assert endpoint["id"] not in {e["id"] for e in sim_stack.cli_json("endpoint", "list")}
    assert not (sim_stack.state_dir / "volumes" / "ephemeral" / workflow_id).exists()
    # Usage (issue 34): the copy's span was opened at its reservation, marked ready and closed at the stop, so its
    # GPU-seconds no longer grow (an open span counts until now).
    usage = [next((r["gpu_seconds_reserved"], r["gpu_seconds_ready"])
                  for r in sim_stack.cli_json("usage", "--by", "workflow", "--since", "1h")["rows"]
                  if r["key"] == workflow_id) for _ in range(2)]
    assert usage[0] == usage[1] and 0 < usage[0][1] < usage[0][0], usage


@pytest.mark.litellm
def test_rank_dying_during_startup_shows_its_log(sim_stack: RunningStack) -> None:
    # vLLM (and the simulator) refuse --enable-auto-tool-choice without --tool-call-parser and exit 2.
    workflow_id = sim_stack.start_entry(
        "vLLM", "Model=hf://Qwen/Qwen3-0.6B,Proxy=false,ExtraArgs=--enable-auto-tool-choice", watch=False)
    info = sim_stack.wait_phase(workflow_id, {"failed"}, timeout=60)
    error = info["last_error"]
    assert "rank 0 on node" in error and "exited with status 2" in error
    assert "last lines of its log" in error and "tool-call-parser" in error
    text = sim_stack.cli("workflow", "describe", workflow_id).stdout
    assert "Last error" in text and "tool-call-parser" in text
    nodes = sim_stack.cli_json("node", "list")
    assert not [g for n in nodes for g in n["gpus"] if (g["allocated_to"] or "").startswith(workflow_id)]
