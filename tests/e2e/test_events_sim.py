"""The event stream on the shared simulated stack, through the real CLI, API, Temporal and node agents: a scripted
start → ready → scale → stop records each step in order — workflow.started, copy.placed, copy.ready,
workflow.scaled, workflow.stopped and copy.stopped (the copy's workflow says it ended on request); the nodes' joins
are there for everyone, and another user sees none of the workflow's events."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import RunningStack, wait_for

pytestmark = pytest.mark.timeout(600)
MODEL = "Qwen/Qwen3-0.6B"
STRANGER = "events-frank"  # a user of this module's own on the shared stack


def _events(stack: RunningStack, token: str | None = None, **query: str) -> list[dict[str, Any]]:
    """Through the API (a wait polls it: no CLI process a poll)."""
    answer = httpx.get(stack.info["api_url"] + "/v1/events", params={"limit": "1000", **query}, timeout=30,
                       headers={"Authorization": f"Bearer {token or stack.token}"}, verify=stack.verify)
    answer.raise_for_status()
    return list(answer.json()["events"])


def _kinds(stack: RunningStack, workflow_id: str) -> list[str]:
    return [event["kind"] for event in _events(stack, workflow=workflow_id)]


def test_a_start_ready_scale_stop_as_events(sim_stack: RunningStack) -> None:
    workflow_id = sim_stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MaxReplicas=2,Scope=user")
    wait_for(lambda: "copy.ready" in _kinds(sim_stack, workflow_id), 60, "copy.ready recorded")
    sim_stack.cli("workflow", "scale", workflow_id, "--replicas", "2")
    wait_for(lambda: _kinds(sim_stack, workflow_id).count("copy.ready") == 2, 120, "the second copy.ready")
    sim_stack.cli("workflow", "stop", workflow_id)
    wait_for(lambda: _kinds(sim_stack, workflow_id).count("copy.stopped") == 2, 120, "two copy.stopped recorded")
    events = [e for e in _events(sim_stack, workflow=workflow_id) if e["kind"] != "placement.blocked"]
    assert [e["kind"] for e in events] == [
        "workflow.started", "copy.placed", "copy.ready", "workflow.scaled", "copy.placed", "copy.ready",
        "workflow.stopped", "copy.stopped", "copy.stopped"]
    assert events[0]["actor"] == "admin" and events[0]["details"] == {"entry": "vLLM"}
    assert events[3]["details"] == {"copies": 2}
    copies = {e["copy_id"] for e in events if e["kind"] == "copy.placed"}
    assert {e["copy_id"] for e in events[-2:]} == copies and all(e["details"] == {"status": "stopped"}
                                                                 for e in events[-2:])

    table = sim_stack.cli("events", "--workflow", workflow_id, "--kind", "copy").stdout
    assert "copy.placed" in table and "copy.ready" in table and "copy.stopped" in table
    nodes = {e["node_id"] for e in _events(sim_stack, kind="node.joined")}
    assert len(nodes) >= 2  # the stack's two node agents joined
    sim_stack.cli("user", "create", STRANGER, "--org", "events-elsewhere")
    token = sim_stack.cli("login", "--user", STRANGER, "--print-token").stdout.strip()
    theirs = _events(sim_stack, token)
    # Not one event of the workflow (scope user), not even its copy on a node's line; the nodes' joins, yes.
    assert not [e for e in theirs if workflow_id in f"{e['workflow_id']} {e['copy_id']} {e['message']}"]
    assert {e["node_id"] for e in theirs if e["kind"] == "node.joined"} == nodes
