"""Explain routing on the shared simulated stack, through the real endpoint proxy: the proxy reports its scrapes of
the copies it routes to (gateway/endpoint/scrape_report.py), so `berth explain routing` judges a ready copy's
figures fresh at the control plane."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import RunningStack, wait_for

pytestmark = pytest.mark.timeout(300)


def test_a_ready_copy_is_judged_on_the_proxys_reported_scrapes(sim_stack: RunningStack) -> None:
    workflow_id = sim_stack.start_entry("vLLM", "Model=hf://Qwen/Qwen3-0.6B,GpusPerNode=1,Proxy=false,Scope=user")
    endpoint_id = sim_stack.endpoint(workflow_id)["id"]

    def judged() -> dict[str, Any] | None:
        answer = sim_stack.cli_json("explain", "routing", endpoint_id)
        copies = answer["copies"]
        return answer if copies and all(c["metrics_fresh"] is not None for c in copies) else None
    answer = wait_for(judged, 60, "the proxy's scrape report to reach the control plane")
    [copy] = answer["copies"]
    assert (copy["verdict"], copy["metrics_fresh"]) == ("included", True)
    assert not answer.get("note") or "is not known here" not in answer["note"]
    sim_stack.cli("workflow", "stop", workflow_id)
