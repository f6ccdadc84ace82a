"""`berth apply`/`berth diff` and `berth workflow catalog start --name` against a real API on loopback (its
Temporal a stand-in that records starts and answers describe as running): a named start is that workflow's
ID, a taken name is refused in one line (to another user too, naming no owner), apply creates, then does
nothing the second time, diff exits 0/2; the update path rolls only the changed keys (the revision calls are
stubbed on the client: the stand-in Temporal runs no workflow to take `roll_to`; tests/e2e/test_rollouts.py
applies through the real routes and workflow)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus
from typer.testing import CliRunner

from berth.api_client import ApiClient
from berth.contracts import WorkflowRevision, WorkflowStarted, WorkflowUpdated, WorkflowUpdateRequest
from berth.security import Identity
from cli.app import app
from server.app import build_context
from server.context import ServerContext
from tests.cli.loopback_api import serve_api

ENTRY = "SmolLM2 135M Instruct"


@dataclass
class FakeTemporal:
    """What the start and describe routes ask of Temporal: a start recorded, a started ID running."""

    started: list[str] = field(default_factory=list)

    async def start_workflow(self, _run: Any, _input: Any, *, id: str, task_queue: str,  # noqa: A002
                             id_conflict_policy: Any = None) -> None:
        self.started.append(id)

    def get_workflow_handle(self, workflow_id: str) -> Any:
        async def describe() -> Any:
            return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING,
                                   raw_description=SimpleNamespace(pending_activities=[]))

        async def query(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("no control worker in this test")

        return SimpleNamespace(id=workflow_id, describe=describe, query=query)


@dataclass
class Served:
    context: ServerContext
    temporal: FakeTemporal
    base_url: str
    given: dict[str, dict[str, Any]]  # what each named start was given: revision 1's values
    updates: list[tuple[str, WorkflowUpdateRequest]]


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")
    temporal = FakeTemporal()
    context._temporal = temporal  # type: ignore[assignment]
    alice = context.store.ensure_user("alice", org="default", groups=["default"])
    context.store.ensure_user("bob", org="default", groups=["default"])
    served = Served(context, temporal, "", {}, [])
    original_start = ApiClient.start_workflow

    async def start(api: ApiClient, entry: str, values: dict[str, Any], name: str | None = None) -> WorkflowStarted:
        started = await original_start(api, entry, values, name)
        served.given[started.id] = values
        return started

    async def revisions(_api: ApiClient, workflow_id: str) -> list[WorkflowRevision]:
        return [WorkflowRevision(workflow_id=workflow_id, revision=1, entry=ENTRY, values=served.given[workflow_id],
                                 by="alice", at=0.0, state="serving")]

    async def update(_api: ApiClient, workflow_id: str, request: WorkflowUpdateRequest) -> WorkflowUpdated:
        served.updates.append((workflow_id, request))
        return WorkflowUpdated(id=workflow_id, revision=2, url="http://x", message="rolling")

    monkeypatch.setattr(ApiClient, "start_workflow", start)
    monkeypatch.setattr(ApiClient, "workflow_revisions", revisions)
    monkeypatch.setattr(ApiClient, "update_workflow", update)
    with serve_api(context, context.signing.api_token(alice), tmp_path, monkeypatch):
        served.base_url = os.environ["BERTH_API_URL"]
        admin = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
        heartbeat = {"address": "127.0.0.1", "engine": "simulator", "port_start": 40000, "gpus": [], "taints": []}
        response = httpx.post(f"{served.base_url}/v1/nodes/cpu-only/heartbeat", json=heartbeat,
                              headers={"Authorization": f"Bearer {admin}"}, timeout=10)
        assert response.status_code == 200, response.text
        yield served


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def _file(tmp_path: Path, context: int = 2048) -> Path:
    path = tmp_path / "berth.yaml"
    path.write_text(f"name: smol\nentry: {ENTRY}\nscope: group\nvalues: {{MaxContextSize: {context}}}\n"
                    f"---\nname: smol-b\nentry: {ENTRY}\nvalues: {{MaxContextSize: '2048'}}\n")
    return path


def test_a_named_start_is_the_workflow_id_and_a_taken_name_is_refused(served: Served) -> None:
    code, out = _run("workflow", "catalog", "start", ENTRY, "--name", "my-smol")
    assert code == 0 and out.strip() == "my-smol", out
    assert served.temporal.started == ["my-smol"]
    code, out = _run("workflow", "catalog", "start", ENTRY, "--name", "my-smol")
    assert code == 1 and "a workflow named my-smol exists; choose another name" in out and "Traceback" not in out
    code, out = _run("workflow", "catalog", "start", ENTRY, "--name", "My_Smol")
    assert code == 1 and "name" in out and len(out.strip().splitlines()) == 1, out
    bob = served.context.signing.api_token(Identity(user="bob", groups=("default",), org="default"))
    response = httpx.post(f"{served.base_url}/v1/workflows", json={"entry": ENTRY, "name": "my-smol"},
                          headers={"Authorization": f"Bearer {bob}"}, timeout=10)
    assert response.status_code == 409 and "alice" not in response.text, response.text
    assert served.temporal.started == ["my-smol"]


def test_apply_twice_does_nothing_the_second_time(served: Served, tmp_path: Path) -> None:
    path = _file(tmp_path)
    code, out = _run("diff", "-f", str(path))
    assert code == 2 and f"+ create smol ({ENTRY})" in out and f"+ create smol-b ({ENTRY})" in out, out
    code, out = _run("apply", "-f", str(path))
    assert code == 0 and f"created smol ({ENTRY}): http" in out and "created smol-b" in out, out
    assert served.temporal.started == ["smol", "smol-b"]
    assert served.given["smol"] == {"MaxContextSize": 2048, "Scope": "group"}
    code, out = _run("apply", "-f", str(path))
    assert code == 0 and out.splitlines() == ["unchanged smol (revision 1)", "unchanged smol-b (revision 1)"], out
    assert served.temporal.started == ["smol", "smol-b"] and served.updates == []
    code, out = _run("diff", "-f", str(path), "-o", "json")
    assert code == 0 and [step["action"] for step in json.loads(out)] == ["unchanged", "unchanged"]


def test_apply_rolls_only_the_changed_values(served: Served, tmp_path: Path) -> None:
    assert _run("apply", "-f", str(_file(tmp_path)))[0] == 0
    path = _file(tmp_path, context=4096)
    code, out = _run("diff", "-f", str(path))
    assert code == 2 and "~ update smol (revision 1): MaxContextSize: 2048 → 4096" in out, out
    assert "= unchanged smol-b (revision 1)" in out and served.updates == []
    code, out = _run("apply", "-f", str(path), "-o", "json")
    assert code == 0, out
    assert [(step["name"], step["action"]) for step in json.loads(out)] == [("smol", "update"),
                                                                            ("smol-b", "unchanged")]
    assert [(name, request.values) for name, request in served.updates] == [("smol", {"MaxContextSize": 4096})]


def test_the_first_error_stops_apply_saying_what_was_applied(served: Served, tmp_path: Path) -> None:
    path = tmp_path / "berth.yaml"
    path.write_text(f"name: ok-one\nentry: {ENTRY}\n---\nname: bad-one\nentry: No Such Entry\n---\n"
                    f"name: never\nentry: {ENTRY}\n")
    code, out = _run("apply", "-f", str(path))
    assert code == 1 and "created ok-one" in out and "document 2 (bad-one)" in out, out
    assert "applied before it: ok-one" in out and served.temporal.started == ["ok-one"]
    code, out = _run("apply", "-f", str(tmp_path / "missing.yaml"))
    assert code == 1 and "cannot read" in out
