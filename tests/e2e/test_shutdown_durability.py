"""A Temporal crash followed by `berth down` / `berth up`: the node agents stop their ranks while nothing
can record it, and mark them stopped by shutdown on the node; after `up`, the restarted agents asked to
adopt them read the marks, so every copy is re-placed as interrupted and no workflow fails."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import RunningStack, free_port_base, wait_for

HEARTBEAT_TIMEOUT_S = 8
ADOPT_WINDOW_S = 10
MODEL = "Model=hf://nvidia/some-model,GpusPerNode=1,Proxy=false"
DOWN_BOUND_S = 150  # berth down's own bound (120 s for the supervisor), plus the CLI's start


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[RunningStack]:
    running = RunningStack(
        state_dir=tmp_path / "state", port_base=free_port_base(), nodes=1, simulate_gpus="3x80GB",
        extra_env={
            "BERTH_RANK_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
            "BERTH_RANK_ADOPT_WINDOW_S": str(ADOPT_WINDOW_S),
            # Temporal is killed by hand and must stay dead until `berth down`.
            "BERTH_RESTART_COMPONENTS": "false",
        },
    ).start()
    try:
        yield running
    finally:
        running.stop()


def _chat(endpoint: dict[str, Any], token: str) -> int:
    response = httpx.post(
        endpoint["url"] + "/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {token}"},
        json={"model": "nvidia/some-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    )
    return response.status_code


def _serving_again(stack: RunningStack, workflow_id: str, before: set[str], copies: int) -> dict[str, Any] | None:
    """The workflow once `copies` fresh copies (none of `before`) serve, or None."""
    info = stack.describe(workflow_id)
    fresh = [r for r in info.get("replicas", []) if r["status"] == "ready" and r["copy_id"] not in before]
    return info if info.get("phase") == "ready" and len(fresh) == copies else None


def test_temporal_crash_then_down_and_up_interrupts_copies_and_fails_nothing(stack: RunningStack) -> None:
    pool = stack.start_entry("vLLM", MODEL + ",MinReplicas=2,MaxReplicas=2,ReplaceFailedCopies=2")
    single = stack.start_entry("vLLM", MODEL)
    workflows = {pool: 2, single: 1}
    endpoints = {w: stack.endpoint(w) for w in workflows}
    tokens = {w: stack.token_for(endpoints[w]["id"], "8h") for w in workflows}
    before: dict[str, set[str]] = {}
    for workflow_id, copies in workflows.items():
        info = wait_for(lambda w=workflow_id, c=copies: _serving_again(stack, w, set(), c), 120,
                        f"{workflow_id} to serve")
        before[workflow_id] = {r["copy_id"] for r in info["copies"]}
        assert _chat(endpoints[workflow_id], tokens[workflow_id]) == 200
    temporal = next(c["pid"] for c in stack.info["children"] if c["name"] == "temporal")
    os.kill(temporal, signal.SIGKILL)  # a crash: nothing records what happens next
    started = time.monotonic()
    stack.cli("down", "--state-dir", str(stack.state_dir), timeout=DOWN_BOUND_S)
    elapsed = time.monotonic() - started
    assert elapsed < DOWN_BOUND_S, f"berth down took {elapsed:.0f} s with Temporal dead"
    marks = sorted(p.parent.name for p in (stack.state_dir / "nodes").glob("*/ranks/*/stopped-by-shutdown.json"))
    assert len(marks) == 3, marks  # every rank stopped by the shutdown said so on the node

    stack.start()  # the same state dir
    for workflow_id, copies in workflows.items():
        info = wait_for(lambda w=workflow_id, c=copies: _serving_again(stack, w, before[w], c),
                        HEARTBEAT_TIMEOUT_S + ADOPT_WINDOW_S + 120, f"{workflow_id} to serve again")
        assert info["status"] == "running" and not info.get("last_error")
        kinds = [e["kind"] for e in info["events"]]
        assert "copy_failed" not in kinds and "copy_replaced" not in kinds, kinds
        interrupted = [e for e in info["events"] if e["kind"] == "copy_interrupted"]
        assert {e["copy_id"] for e in interrupted} == before[workflow_id]
        assert all("was stopped because its node agent shut down: its node agent stopped it on shutdown at"
                   in e["message"] for e in interrupted), interrupted
        assert stack.endpoint(workflow_id)["url"] == endpoints[workflow_id]["url"]
        assert _chat(endpoints[workflow_id], tokens[workflow_id]) == 200
    # The marks were read by the adoptions that asked for them: none is left to mislead a later agent.
    assert not list((stack.state_dir / "nodes").glob("*/ranks/*/stopped-by-shutdown.json"))
