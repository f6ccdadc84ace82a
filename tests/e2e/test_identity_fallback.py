"""With JWKS publication off (`BERTH_PUBLISH_JWKS=false`), LiteLLM cannot check caller assertions and
falls back to its key check: the documents' "nodes have not picked up the signing keys" row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import RunningStack, free_port_base

pytestmark = pytest.mark.litellm


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("jwks-off-stack"))
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB",
                           extra_env={"BERTH_PUBLISH_JWKS": "false"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_no_jwks_means_the_key_decides(stack: RunningStack) -> None:
    jwks = httpx.get(stack.info["api_url"] + "/.well-known/jwks.json", timeout=10)
    assert jwks.status_code == 404
    workflow_id = stack.start_entry("GPT-OSS 20B")
    endpoint = stack.endpoint(workflow_id)
    token = stack.token_for(endpoint["id"])
    url = endpoint["url"] + "/v1/models"
    # A valid Berth token passes the endpoint proxy, but LiteLLM cannot verify the assertion.
    refused = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "Authentication Error, No api key passed in."
    key = stack.api("GET", f"/v1/workflows/{workflow_id}/definition").json()["definition"]["api_key"]
    headers = {"Authorization": f"Bearer {token}", "x-litellm-api-key": key}
    admitted = httpx.get(url, headers=headers, timeout=30)
    assert admitted.status_code == 200
    assert [m["id"] for m in admitted.json()["data"]] == ["openai/gpt-oss-20b"]
    stack.cli("workflow", "stop", workflow_id)
