"""Issue 11, item 10: a Hugging Face revision is a git ref or commit, never a path (`@../../x` made a
directory outside the workflow's volume); the CLI encodes IDs into URL paths (`workflow describe
../../v1/internal/routes` called an internal route) and the API refuses IDs outside the ID grammar;
`/v1/models` through the proxy no longer shows the weights' path in the state dir (`root`)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities.node_context import NodeContext
from activities.weights_activity import model_dir_for
from berth.settings import StateLayout
from catalog.definition import WeightsJob
from tests.security.conftest import People
from tests.support import wait_for
from workflows.payloads import WeightsInput

MODEL = "GPT-OSS 20B"


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 300, text[:2000]
    return lines[0]


def _directories(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_dir()} if root.exists() else set()


@pytest.mark.parametrize("revision", ["../../../../tmp/x", "..", "/etc", "-rf", "a/../../b", 'main"\nevil: 1',
                                      "with space", "x" * 200])
def test_a_revision_that_is_not_a_git_ref_is_refused(people: People, revision: str) -> None:
    volumes = people.stack.state_dir / "volumes"
    before = _directories(volumes)
    model = f"hf://openai/gpt-oss-20b@{revision}"
    response = people.api("bob", "POST", "/v1/workflows", json={"entry": MODEL, "values": {"Model": model}})
    assert response.status_code == 400, response.text[:500]
    assert "revision" in _one_line(response.json()["detail"])
    if "\n" not in revision:
        result = people.cli("bob", "workflow", "catalog", "start", MODEL, "--values", f"Model={model}")
        assert result.returncode != 0 and result.stdout == ""
        assert "revision" in _one_line(result.stderr)
    assert _directories(volumes) == before  # nothing was made, inside the volumes or beside them


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "0123456789abcdef0123456789abcdef01234567"])
def test_real_revisions_still_pass(revision: str) -> None:
    assert _job("openai/gpt-oss-20b", revision).revision == revision


def _job(repo: str, revision: str) -> WeightsJob:
    return WeightsJob(repo=repo, revision=revision, volume=None, size_bytes_hint=0)


def test_the_node_refuses_a_weights_path_outside_the_volume(tmp_path: Path) -> None:
    """Defence in depth where the path is made: a job that skipped validation (an old history, a
    hand-made payload) still cannot name a directory outside its volume."""
    context = NodeContext(node_id="n1", address="127.0.0.1", engine="simulator", state=StateLayout(tmp_path))
    for repo, revision in (("openai/gpt-oss-20b", "../../../../tmp/x"), ("../../etc", "main")):
        job = WeightsJob.model_construct(repo=repo, revision=revision, allow_patterns=(), ignore_patterns=(),
                                         volume=None, hf_token_secret=None, size_bytes_hint=0)
        with pytest.raises(ApplicationError) as refused:
            model_dir_for(context, WeightsInput.model_construct(workflow_id="wf-1", job=job, owner="bob"))
        assert refused.value.non_retryable
    fine = WeightsInput(workflow_id="wf-1", job=_job("openai/gpt-oss-20b", "main"), owner="bob")
    assert model_dir_for(context, fine).is_relative_to(tmp_path / "volumes")


def test_the_cli_encodes_ids_so_no_other_route_is_called(people: People) -> None:
    for args in (("workflow", "describe", "../../v1/internal/routes"), ("workflow", "describe", ".."),
                 ("workflow", "stop", "../../v1/internal/routes"), ("endpoint", "generate-token", "../../v1/nodes")):
        result = people.cli("admin", *args)
        assert result.returncode != 0, result.stdout[:500]
        assert "routing_policy" not in result.stdout and "replicas" not in result.stdout
        assert "gpus" not in result.stdout
        _one_line(result.stderr)


@pytest.mark.parametrize("path", ["/v1/workflows/a%20b", "/v1/workflows/..x", "/v1/endpoints/ep%0Ax",
                                  "/v1/endpoints/%3Cscript%3E/client-config", "/v1/workflows/" + "w" * 200])
def test_the_api_refuses_ids_outside_the_id_grammar(people: People, path: str) -> None:
    response = people.api("admin", "GET", path)
    assert response.status_code == 400, response.text[:500]
    assert "IDs are letters" in _one_line(response.json()["detail"])
    assert len(response.text) < 400


def test_model_listings_do_not_show_the_state_dir(people: People) -> None:
    result = people.cli("admin", "workflow", "catalog", "start", MODEL, "--values", "Proxy=false,Scope=user",
                        check=True)
    workflow_id = result.stdout.strip().splitlines()[0]
    try:
        wait_for(lambda: people.api("admin", "GET", f"/v1/workflows/{workflow_id}").json().get("phase") == "ready",
                 240, f"{workflow_id} ready")
        endpoint = people.api("admin", "GET", f"/v1/workflows/{workflow_id}").json()["endpoint"]
        token = people.cli("admin", "endpoint", "generate-token", endpoint["id"], check=True).stdout.strip()
        response = httpx.get(endpoint["url"] + "/v1/models", headers={"Authorization": f"Bearer {token}"},
                             timeout=30)
        assert response.status_code == 200, response.text[:500]
        cards = response.json()["data"]
        assert cards and all(card.get("root") == card["id"] for card in cards), cards
        assert str(people.stack.state_dir) not in response.text and "volumes" not in response.text
    finally:
        people.cli("admin", "workflow", "stop", workflow_id)
