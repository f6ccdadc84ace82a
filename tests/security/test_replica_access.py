"""Issue 11, item 8: a copy is reachable only through Berth. `ExtraArgs` may not move a copy's address or
drop its key (refused at submission); each copy has its own API key that only Berth's components hold
(endpoint proxy, LiteLLM, gateway), handed to vLLM in its environment (never argv), so a copy reached
directly on the cluster network answers 401 — on /v1 by vLLM's own check, and (issue 29, finding 1) on
every other path but `GET /health` by the rank's guard (rank/berth_rank_guard.py) — and no user ever
reads its key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.security import ReplicaKeys
from tests.security.conftest import People
from tests.support import process_environment, processes_mentioning, rank_record, wait_for

MODEL = "GPT-OSS 20B"
MODEL_ID = "openai/gpt-oss-20b"
CHAT = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _start(people: People, person: str, entry: str, values: str) -> str:
    result = people.cli(person, "workflow", "catalog", "start", entry, "--values", values, check=True)
    return str(result.stdout.strip().splitlines()[0])


def _described(people: People, workflow_id: str) -> dict[str, Any]:
    return people.api("admin", "GET", f"/v1/workflows/{workflow_id}").json()  # type: ignore[no-any-return]


def _ready_copy(people: People, workflow_id: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        described = _described(people, workflow_id)
        copies = [r for r in described.get("replicas") or [] if r["status"] == "ready"]
        return copies[0] if described.get("phase") == "ready" and copies else None
    return wait_for(ready, 240, f"{workflow_id} ready")  # type: ignore[no-any-return]


def _endpoint(people: People, person: str, workflow_id: str) -> dict[str, Any]:
    rows = people.api(person, "GET", "/v1/endpoints").json()
    return next(row for row in rows if row["workflow_id"] == workflow_id)  # type: ignore[no-any-return]


def _endpoint_token(people: People, person: str, endpoint_id: str) -> str:
    result = people.cli(person, "endpoint", "generate-token", endpoint_id, "--expiration", "1h", check=True)
    return str(result.stdout.strip())


@pytest.fixture(scope="module")
def pools(people: People) -> Iterator[dict[str, str]]:
    started = {
        "direct": _start(people, "bob", MODEL, "Proxy=false,Scope=organization"),
        "proxied": _start(people, "bob", MODEL, "Proxy=true,Scope=organization"),
    }
    try:
        for workflow_id in started.values():
            _ready_copy(people, workflow_id)
        yield started
    finally:
        for workflow_id in started.values():
            people.cli("admin", "workflow", "stop", workflow_id)


@pytest.mark.parametrize(("extra_args", "flag"), [
    ("--host 0.0.0.0", "--host"), ("--host=0.0.0.0", "--host"), ("--port 1", "--port"),
    ("--api-key x", "--api-key"), ("--config f", "--config"),
])
def test_extra_args_may_not_set_berths_flags(people: People, extra_args: str, flag: str) -> None:
    result = people.cli("bob", "workflow", "catalog", "start", MODEL, "--values",
                        f"Proxy=false,ExtraArgs={extra_args}")
    assert result.returncode != 0, result.stdout
    assert f"ExtraArgs may not set {flag}: Berth sets it" in result.stderr
    refused = people.api("bob", "POST", "/v1/workflows",
                         json={"entry": MODEL, "values": {"Proxy": "false", "ExtraArgs": extra_args}})
    assert refused.status_code == 400
    assert refused.json()["detail"].startswith(f"ExtraArgs may not set {flag}: ")
    assert "\n" not in refused.json()["detail"]


@pytest.mark.litellm
def test_a_copy_reached_directly_refuses_the_caller_and_berth_reaches_it(
        people: People, pools: dict[str, str]) -> None:
    for kind, workflow_id in pools.items():
        copy = _ready_copy(people, workflow_id)
        copy_url = copy["url"]
        # What anyone on the cluster network can do: no key, or a guessed one.
        for headers in ({}, {"Authorization": "Bearer none"}, {"Authorization": f"Bearer {people.tokens['bob']}"}):
            assert httpx.post(copy_url + "/v1/chat/completions", json=CHAT, headers=headers,
                              timeout=30).status_code == 401, kind
            assert httpx.get(copy_url + "/v1/models", headers=headers, timeout=30).status_code == 401, kind
            # vLLM's routes outside /v1 (no key there in vLLM) and the engine's figures: the rank's guard.
            for path in ("/invocations", "/tokenize", "/detokenize", "/pooling", "/score", "/classify", "/rerank"):
                answer = httpx.post(copy_url + path, json=CHAT, headers=headers, timeout=30)
                assert answer.status_code == 401 and "answers only Berth" in answer.text, (kind, path)
            for path in ("/metrics", "/version", "/ping", "/health/"):
                assert httpx.get(copy_url + path, headers=headers, timeout=30).status_code == 401, (kind, path)
        assert httpx.get(copy_url + "/health", timeout=30).status_code == 200  # liveness only: no key, no body
        copy_key = {"Authorization": f"Bearer {people.stack.replica_key(copy['copy_id'])}"}
        assert httpx.post(copy_url + "/tokenize", json={"model": MODEL_ID, "prompt": "hi"}, headers=copy_key,
                          timeout=30).status_code == 200  # Berth's own callers pass on every path
        assert "vllm:num_requests_running" in httpx.get(copy_url + "/metrics", headers=copy_key, timeout=30).text
        # Through the endpoint proxy (and, for Proxy=true, LiteLLM): the copy gets its key and answers.
        endpoint = _endpoint(people, "carol", workflow_id)  # carol: bob's organization, another group
        token = _endpoint_token(people, "carol", endpoint["id"])
        answer = httpx.post(endpoint["url"] + "/v1/chat/completions", json=CHAT, timeout=60,
                            headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, (kind, answer.text)
        assert answer.json()["choices"][0]["message"] is not None


@pytest.mark.litellm
def test_the_gateway_reaches_the_copies_its_owner_may(people: People, pools: dict[str, str]) -> None:
    gateway = _start(people, "carol", "LiteLLM Model Gateway", "Scope=user")
    try:
        wait_for(lambda: _described(people, gateway).get("phase") == "ready", 240, "the gateway ready")
        endpoint = _endpoint(people, "carol", gateway)
        token = _endpoint_token(people, "carol", endpoint["id"])
        headers = {"Authorization": f"Bearer {token}"}

        def lists_the_model() -> bool:
            listed = httpx.get(endpoint["url"] + "/v1/models", headers=headers, timeout=30)
            return listed.status_code == 200 and MODEL_ID in [m["id"] for m in listed.json()["data"]]
        wait_for(lists_the_model, 60, "the gateway discovering bob's Proxy=false pool")
        answer = httpx.post(endpoint["url"] + "/v1/chat/completions", json=CHAT, headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
    finally:
        people.cli("admin", "workflow", "stop", gateway)


def _keys(people: People, pools: dict[str, str]) -> dict[str, str]:
    """Each copy's key, as the operator can derive it from the state dir (no user can)."""
    derive = ReplicaKeys.load_or_create(Path(people.stack.state_dir) / "keys")
    copies = [_ready_copy(people, workflow_id)["copy_id"] for workflow_id in pools.values()]
    return {copy_id: derive.for_copy(copy_id) for copy_id in copies}


@pytest.mark.litellm
def test_the_key_is_in_the_ranks_environment_never_in_a_command_line(
        people: People, pools: dict[str, str]) -> None:
    for copy_id, key in _keys(people, pools).items():
        record = rank_record(Path(people.stack.state_dir), copy_id, 0)
        assert key not in Path(f"/proc/{record['pid']}/cmdline").read_bytes().decode(errors="replace")
        assert process_environment(record["pid"])["VLLM_API_KEY"] == key
        assert processes_mentioning(key) == []  # no rank, LiteLLM or gateway command line holds it
        log = people.api("bob", "GET", f"/v1/workflows/{record['spec']['workflow_id']}/logs",
                         params={"job": "vllm-rank-0"}).json()["text"]
        assert log and key not in log


@pytest.mark.litellm
def test_no_user_reads_a_copys_key(people: People, pools: dict[str, str]) -> None:
    keys = _keys(people, pools)
    for person in ("bob", "carol"):  # the owner, and a caller in the pools' scope
        outputs = [people.cli(person, "endpoint", "list", "-o", "json", check=True).stdout,
                   people.api(person, "GET", "/v1/endpoints").text]
        for workflow_id in pools.values():
            outputs.append(people.cli(person, "workflow", "describe", workflow_id, "-o", "json", check=True).stdout)
            outputs.append(people.api(person, "GET", f"/v1/workflows/{workflow_id}").text)
        outputs.append(people.cli("bob", "workflow", "get", pools["direct"], check=True).stdout)
        for output in outputs:
            assert not any(key in output for key in keys.values())
        # The routes that carry keys refuse users, whatever token they hold.
        endpoint_id = _endpoint(people, person, pools["proxied"])["id"]
        endpoint_token = _endpoint_token(people, person, endpoint_id)
        for token in (people.tokens[person], endpoint_token):
            for path in ("/v1/internal/routes", f"/v1/internal/endpoints/{endpoint_id}/replicas",
                         "/v1/internal/replica-keys"):
                refused = httpx.get(people.stack.info["api_url"] + path, timeout=30,
                                    headers={"Authorization": f"Bearer {token}"})
                assert refused.status_code in (401, 403), (path, refused.status_code)
                assert not any(key in refused.text for key in keys.values())
        minted = people.api(person, "POST", f"/v1/internal/users/{person}/replica-keys-token")
        assert minted.status_code == 403
