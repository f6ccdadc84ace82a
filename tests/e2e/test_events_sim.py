"""The event stream on the shared simulated stack, through the real CLI, API, Temporal and node agents (and, on the
same ready copy, explain routing judging it on the endpoint proxy's scrape report): a scripted start → ready →
scale → stop records each step in order — workflow.started, copy.placed, copy.ready,
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
    _judged_fresh_by_explain_routing(sim_stack, workflow_id)  # the same ready copy: no second start for it
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


def _judged_fresh_by_explain_routing(stack: RunningStack, workflow_id: str) -> None:
    """Explain routing judges the ready copy on the real endpoint proxy's scrape report (gateway/endpoint/
    scrape_report.py, every 5 s): fresh, included, and no note that freshness is unknown. Here, on this module's
    workflow, so that the shared stack starts one copy fewer."""
    endpoint_id = stack.endpoint(workflow_id)["id"]

    def judged() -> dict[str, Any] | None:
        answer: dict[str, Any] = stack.api("GET", f"/v1/explain/routing/{endpoint_id}").json()
        copies = answer.get("copies", [])
        return answer if copies and all(c["metrics_fresh"] is not None for c in copies) else None
    answer = wait_for(judged, 60, "the proxy's scrape report to reach the control plane")
    assert [(c["verdict"], c["metrics_fresh"]) for c in answer["copies"]] == [("included", True)]
    assert not answer.get("note") or "is not known here" not in answer["note"]
