"""Issue 13, item 5: every secret reference a workflow names is checked at submission (it exists for the
owner, by the resolution rules, and has the type the parameter needs), so a bad one is one line, not a
workflow holding GPUs until a node asks for the value; and a simulated node resolves HfTokenSecret as a
real node does, so a secret deleted after submission fails the same way on both."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.node_context import NodeContext
from activities.weights_activity import download_into_volume
from berth.api_client import ApiClient
from berth.settings import HF_HUB_ENDPOINT, StateLayout
from catalog.definition import WeightsJob
from tests.security.conftest import People
from workflows.payloads import WeightsInput, WeightsResult


def _workflow_ids(people: People, person: str) -> set[str]:
    return {row["id"] for row in people.api(person, "GET", "/v1/workflows").json()}


def _refused_line(people: People, person: str, entry: str, values: str) -> str:
    """Start `entry` with the real CLI as `person`; assert it is refused in one line and nothing starts."""
    before = _workflow_ids(people, person)
    result = people.cli(person, "workflow", "catalog", "start", entry, "--values", values)
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert _workflow_ids(people, person) == before
    return str(lines[0])


@pytest.mark.parametrize(("entry", "values", "parameter"), [
    ("GPT-OSS 20B", "ApiKeySecret=secret://user/nope", "ApiKeySecret"),
    ("Llama 4 Scout", "HfTokenSecret=secret://user/nope", "HfTokenSecret"),
    ("LiteLLM Model Gateway", "MasterKeySecret=secret://user/nope", "MasterKeySecret"),
    ("OpenCode", "EndpointAuth=api-key,ApiKeySecret=secret://user/nope", "ApiKeySecret"),
])
def test_a_secret_that_does_not_exist_is_refused_at_submission(people: People, entry: str, values: str,
                                                               parameter: str) -> None:
    line = _refused_line(people, "bob", entry, values)
    assert f"{parameter}=secret://user/nope: no such secret for bob" in line
    assert "berth secret create secret://user/nope --type" in line


def test_another_groups_secret_is_not_the_owners(people: People) -> None:
    """carol's group holds it; bob, outside that group, cannot make his workflow resolve it."""
    ref = f"secret://group/hf-{uuid.uuid4().hex[:6]}"
    people.cli("carol", "secret", "create", ref, '{"token":"hf_carol"}', "--type", "hf", check=True)
    line = _refused_line(people, "bob", "Llama 4 Scout", f"HfTokenSecret={ref}")
    assert f"HfTokenSecret={ref}: no such secret for bob" in line


def test_a_secret_of_the_wrong_type_is_refused_at_submission(people: People) -> None:
    ref = f"secret://user/plain-{uuid.uuid4().hex[:6]}"
    people.cli("bob", "secret", "create", ref, input="not-a-token", check=True)
    line = _refused_line(people, "bob", "Llama 4 Scout", f"HfTokenSecret={ref}")
    assert line.endswith(f"HfTokenSecret={ref} is a 'value' secret; it must be of type hf. Replace it with "
                         f"`berth secret create {ref} --type hf '{{\"token\":\"hf_…\"}}'`.")
    hf = f"secret://user/hf-{uuid.uuid4().hex[:6]}"
    people.cli("bob", "secret", "create", hf, '{"token":"hf_bob"}', "--type", "hf", check=True)
    assert "must be of type value" in _refused_line(people, "bob", "GPT-OSS 20B", f"ApiKeySecret={hf}")


def test_an_existing_secret_of_the_right_type_is_accepted(people: People) -> None:
    ref = f"secret://user/key-{uuid.uuid4().hex[:6]}"
    people.cli("bob", "secret", "create", ref, input="sk-bob-0123456789", check=True)
    started = people.api("bob", "POST", "/v1/workflows",
                         json={"entry": "GPT-OSS 20B", "values": {"ApiKeySecret": ref, "Proxy": "false"}})
    assert started.status_code == 201, started.text
    assert people.api("bob", "POST", f"/v1/workflows/{started.json()['id']}/stop").status_code == 200


def _simulated_download(people: People, tmp_path: Path, ref: str) -> WeightsResult:
    """A simulated node's weights activity for bob's job naming `ref`, resolving through the real API
    with the node's (administrator) credential."""
    context = NodeContext(node_id="n1", address="127.0.0.1", engine="simulator", state=StateLayout(tmp_path))
    job = WeightsJob(repo="meta-llama/Llama-4-Scout-17B-16E-Instruct", hf_token_secret=ref, size_bytes_hint=7)
    request = WeightsInput(workflow_id=f"wf-{uuid.uuid4().hex[:6]}", job=job, owner="bob")

    async def run() -> WeightsResult:
        async with ApiClient(people.stack.info["api_url"], people.tokens["admin"]) as api:
            return await ActivityEnvironment().run(download_into_volume, context, request, HF_HUB_ENDPOINT, api)

    return asyncio.run(run())


def test_a_simulated_node_resolves_the_hf_token_like_a_real_one(people: People, tmp_path: Path) -> None:
    ref = f"secret://user/hf-{uuid.uuid4().hex[:6]}"
    people.cli("bob", "secret", "create", ref, '{"token":"hf_bob"}', "--type", "hf", check=True)
    assert _simulated_download(people, tmp_path, ref).dry_run is True
    # Deleted after submission: the simulated node now fails as a real node would, and for good.
    people.cli("bob", "secret", "delete", ref, check=True)
    with pytest.raises(ApplicationError) as failed:
        _simulated_download(people, tmp_path, ref)
    assert failed.value.type == "SecretError" and failed.value.non_retryable
    assert f"HfTokenSecret {ref}" in failed.value.message and "does not exist for bob" in failed.value.message
