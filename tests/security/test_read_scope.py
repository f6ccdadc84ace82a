"""Issue 11, item 4: reading a workflow follows its own scope, not its owner's organization. Describe: the
scope's members (public: any signed-in user). Engine logs: the scope's members within the owner's
organization. Service logs — OpenCode's `show-server` with the server password first — and the
definition: the owner and administrators only. `node list` names only the caller's own copies."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from berth.security import Identity
from server.access import WorkflowAccess
from server.store.tables import WorkflowRow
from tests.security.conftest import People
from tests.support import wait_for

MODEL = "GPT-OSS 20B"


def _start(people: People, person: str, entry: str, values: str) -> str:
    result = people.cli(person, "workflow", "catalog", "start", entry, "--values", values, check=True)
    return str(result.stdout.strip().splitlines()[0])


def _phase(people: People, workflow_id: str) -> str:
    return str(people.api("admin", "GET", f"/v1/workflows/{workflow_id}").json().get("phase"))


def _ready(people: People, *workflow_ids: str) -> None:
    for workflow_id in workflow_ids:
        wait_for(lambda w=workflow_id: _phase(people, w) == "ready", 240, f"{workflow_id} ready")


@pytest.fixture(scope="module")
def workflows(people: People) -> Iterator[dict[str, str]]:
    started = {
        "admin-user": _start(people, "admin", MODEL, "Proxy=false,Scope=user"),
        "carol-user": _start(people, "carol", MODEL, "Proxy=false,Scope=user"),
        "dave-group": _start(people, "dave", MODEL, "Proxy=false,Scope=group"),
        "bob-org": _start(people, "bob", MODEL, "Proxy=false,Scope=organization"),
    }
    try:
        _ready(people, started["bob-org"])
        url = people.api("bob", "GET", f"/v1/workflows/{started['bob-org']}").json()["endpoint"]["url"]
        started["bob-opencode"] = _start(people, "bob", "OpenCode",
                                         f"Endpoint={url},Model=openai/gpt-oss-20b,ServiceScope=public")
        _ready(people, *started.values())
        yield started
    finally:
        for workflow_id in started.values():
            people.cli("admin", "workflow", "stop", workflow_id)


def _describe(people: People, person: str, workflow_id: str) -> int:
    return people.api(person, "GET", f"/v1/workflows/{workflow_id}").status_code


def _log(people: People, person: str, workflow_id: str, job: str | None = None) -> Any:
    return people.api(person, "GET", f"/v1/workflows/{workflow_id}/logs", params={"job": job} if job else {})


def test_a_user_scoped_workflow_is_read_by_its_owner_and_administrators_only(
        people: People, workflows: dict[str, str]) -> None:
    for key, owner in (("admin-user", "admin"), ("carol-user", "carol")):
        workflow_id = workflows[key]
        # bob shares the organization (and with admin, the group): a user-scoped workflow is still not his.
        for outsider in ("bob", "dave"):
            assert _describe(people, outsider, workflow_id) == 404
            assert _log(people, outsider, workflow_id).status_code == 404
            assert _log(people, outsider, workflow_id, "vllm-rank-0").status_code == 404
            cli = people.cli(outsider, "workflow", "log", workflow_id, "vllm-rank-0")
            assert cli.returncode != 0 and "No workflow" in cli.stderr
        for reader in {owner, "admin"}:
            assert _describe(people, reader, workflow_id) == 200
            assert _log(people, reader, workflow_id, "vllm-rank-0").json()["text"]


def test_group_and_organization_scopes_bound_describe_and_engine_logs(
        people: People, workflows: dict[str, str]) -> None:
    group, organization = workflows["dave-group"], workflows["bob-org"]
    assert _describe(people, "erin", group) == 200  # dave's group
    assert _log(people, "erin", group, "vllm-rank-0").json()["text"]
    for outsider in ("bob", "carol"):  # other organization
        assert _describe(people, outsider, group) == 404
    assert _describe(people, "carol", organization) == 200  # bob's organization, another group
    assert _log(people, "carol", organization, "vllm-rank-0").json()["text"]
    for outsider in ("dave", "erin"):
        assert _describe(people, outsider, organization) == 404
        assert _log(people, outsider, organization, "vllm-rank-0").status_code == 404


def test_the_opencode_password_is_read_by_its_owner_and_administrators_only(
        people: People, workflows: dict[str, str]) -> None:
    opencode = workflows["bob-opencode"]
    shown = people.cli("bob", "workflow", "log", opencode, "show-server", check=True).stdout
    password = re.search(r"password: (\S+)", shown)
    assert password, shown
    assert password.group(1) in people.cli("admin", "workflow", "log", opencode, "show-server", check=True).stdout
    # carol (bob's organization) and dave (another) may see that the public service exists...
    for outsider in ("carol", "dave"):
        described = people.api(outsider, "GET", f"/v1/workflows/{opencode}")
        assert described.status_code == 200 and password.group(1) not in described.text
        # ...but not its logs: not listed, refused in one line, and not its definition.
        jobs = _log(people, outsider, opencode).json()["jobs"]
        assert "show-server" not in jobs and "opencode" not in jobs
        for job in ("show-server", "opencode"):
            refused = _log(people, outsider, opencode, job)
            assert refused.status_code == 403 and "\n" not in refused.json()["detail"]
        cli = people.cli(outsider, "workflow", "log", opencode, "show-server")
        assert cli.returncode != 0 and password.group(1) not in cli.stdout + cli.stderr
        assert people.api(outsider, "GET", f"/v1/workflows/{opencode}/definition").status_code == 403
        got = people.cli(outsider, "workflow", "get", opencode)
        assert got.returncode != 0 and password.group(1) not in got.stdout + got.stderr


def _allocated(people: People, person: str) -> list[str]:
    nodes = people.api(person, "GET", "/v1/nodes").json()
    return [g["allocated_to"] for n in nodes for g in n["gpus"] if g["allocated_to"]]


def test_node_list_names_only_the_callers_own_copies(people: People, workflows: dict[str, str]) -> None:
    models = {k: v for k, v in workflows.items() if k != "bob-opencode"}
    everything = _allocated(people, "admin")
    assert all(any(a.startswith(w) for a in everything) for w in models.values())
    for person, own in (("dave", "dave-group"), ("bob", "bob-org")):
        seen = _allocated(people, person)
        assert len(seen) == len(everything)  # capacity stays visible...
        listing = people.cli(person, "node", "list", "-o", "json", check=True).stdout
        for key, workflow_id in models.items():  # ...other users' workflow IDs do not
            assert (workflow_id in listing) == (key == own), (person, key)


def test_error_lines_quoting_a_log_are_the_owners() -> None:
    row = WorkflowRow(id="wf-1", entry="x", owner="bob", org="default", created_at=0.0, definition="",
                      endpoint_id="ep-1")
    error = "copy wf-1.copy-0 failed: rank 0 exited 1; last lines of its log:\nOPENCODE_SERVER_PASSWORD=s3cret"
    status = {"last_error": error, "events": [{"message": error}], "replicas": [{"detail": error}]}
    outsider = WorkflowAccess(row=row, who=Identity("carol", ("ops",), "default"), endpoint=None)
    assert "s3cret" not in str(outsider.redact_status({**status, "events": [{"message": error}],
                                                       "replicas": [{"detail": error}]}))
    # The copies under both their names (`replicas` is the old one), as the status query now answers them.
    assert "s3cret" not in str(outsider.redact_status({**status, "events": [], "copies": [{"detail": error}],
                                                       "replicas": [{"detail": error}]}))
    owner = WorkflowAccess(row=row, who=Identity("bob", ("default",), "default"), endpoint=None)
    assert "s3cret" in str(owner.redact_status(status))
