"""Berth API keys with real clients on a simulator-backed stack, behind the endpoint's real LiteLLM proxy
(Proxy=true): `berth key create` → the OpenAI SDK, curl and the real OpenCode binary with the `bk_` key; and
the OpenCode document's step — the master key mints a LiteLLM virtual key (`/key/generate`), used as
`x-litellm-api-key` or Bearer, listed and revoked with `berth key`."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.opencode_support import require_opencode, run_opencode
from tests.support import RunningStack

pytestmark = [pytest.mark.litellm, pytest.mark.timeout(600)]  # starts the real LiteLLM proxy

MODEL = "openai/gpt-oss-20b"
MASTER = "sk-keys-test-master-0123456789"
HI: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def endpoint(sim_stack: RunningStack) -> dict[str, Any]:
    workflow_id = sim_stack.start_entry("GPT-OSS 20B", f"ApiKey={MASTER}")
    return sim_stack.endpoint(workflow_id)


def _created_key(sim_stack: RunningStack, endpoint_id: str, *flags: str) -> tuple[str, str]:
    issued = sim_stack.cli_json("key", "create", "clients", "--endpoint", endpoint_id, *flags)
    return issued["key"], issued["record"]["id"]


def test_a_berth_key_with_the_sdk_curl_and_opencode(sim_stack: RunningStack, endpoint: dict[str, Any],
                                                    tmp_path: Path) -> None:
    key, key_id = _created_key(sim_stack, endpoint["id"], "--model", MODEL)
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=key, max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8)
    assert reply.choices[0].message.content
    with pytest.raises(openai.PermissionDeniedError, match="only"):  # the key holds one model
        client.chat.completions.create(model="another/model", messages=HI, max_tokens=8)
    curl = subprocess.run(["curl", "-sS", "--max-time", "60", f"{endpoint['url']}/v1/chat/completions",
                           "-H", f"Authorization: Bearer {key}", "-H", "Content-Type: application/json",
                           "-d", json.dumps({"model": MODEL, "messages": HI, "max_tokens": 8})],
                          capture_output=True, text=True, timeout=90, check=True)
    assert json.loads(curl.stdout)["choices"][0]["message"]["content"]
    require_opencode()
    config = json.loads(sim_stack.cli("endpoint", "opencode-config", endpoint["id"]).stdout)
    run = run_opencode(tmp_path / "project", config,
                       ["run", "--model", f"berth/{MODEL}", "Reply with the single word: ready"],
                       {"BERTH_TOKEN": key})  # the config reads its apiKey from BERTH_TOKEN
    assert run.returncode == 0, run.stdout + run.stderr
    sim_stack.cli("key", "revoke", key_id)


def test_the_master_key_mints_a_litellm_virtual_key(sim_stack: RunningStack, endpoint: dict[str, Any]) -> None:
    url = endpoint["url"]
    with httpx.Client(timeout=60) as http:
        made = http.post(f"{url}/key/generate", headers={"Authorization": f"Bearer {MASTER}"},
                         json={"key_alias": "opencode", "duration": "1h", "models": [MODEL]})
        assert made.status_code == 200, made.text
        virtual = made.json()["key"]
        assert virtual.startswith("sk-bk_")
        for headers in ({"x-litellm-api-key": virtual}, {"Authorization": f"Bearer {virtual}"}):
            answer = http.post(f"{url}/v1/chat/completions", headers=headers,
                               json={"model": MODEL, "messages": HI, "max_tokens": 8})
            assert answer.status_code == 200, answer.text
        wrong = http.post(f"{url}/key/generate", headers={"Authorization": "Bearer sk-not-the-master-key"},
                          json={"key_alias": "x"})
        assert wrong.status_code == 401
    listed = {record["name"]: record for record in sim_stack.cli_json("key", "list")}
    assert listed["opencode"]["endpoint_id"] == endpoint["id"] and listed["opencode"]["model"] == MODEL
    sim_stack.cli("key", "revoke", listed["opencode"]["id"])
    with httpx.Client(timeout=60) as http:
        deadline = time.monotonic() + 15  # a verdict is cached ≤ 5 s: the revocation lands within it
        while True:
            gone = http.post(f"{url}/v1/chat/completions", headers={"x-litellm-api-key": virtual},
                             json={"model": MODEL, "messages": HI, "max_tokens": 8})
            if gone.status_code == 401:
                break
            assert time.monotonic() < deadline, f"still admitted after the revocation: {gone.status_code}"
            time.sleep(0.2)
        assert gone.json()["error"]["code"] == "invalid_api_key"
