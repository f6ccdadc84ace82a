"""`berth workflow explain-scaling WF` against a real API on loopback: the one line before the autoscaler's
first explanation, then the decision, reason, signal, per-copy freshness and thresholds (and -o json)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.contracts.rollouts import ScalingExplanation, ScalingSignal
from cli.app import app
from server.app import build_context
from server.context import ServerContext
from server.store.tables import EndpointRow, WorkflowRow
from tests.cli.loopback_api import serve_api


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the scaling routes never reach Temporal
    alice = context.store.ensure_user("alice", org="default", groups=["default"])
    workflow = WorkflowRow(id="wf-q", entry="vllm", owner="alice", org="default", created_at=time.time(),
                           definition="", endpoint_id="ep-q")
    context.store.add_workflow(workflow, {}, EndpointRow(
        id="ep-q", workflow_id="wf-q", service="vllm", scope="group", owner="alice", org="default",
        groups=["default"], created_at=time.time(), annotations={"pool": True}))
    with serve_api(context, context.signing.api_token(alice), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_explain_scaling(served: ServerContext) -> None:
    code, output = _run("workflow", "explain-scaling", "wf-q")
    assert code != 0 and "the autoscaler has not sized wf-q yet" in output
    reason = ("holding at 2 copies: copy c1's metrics are 40 s old; scale-in waits for fresh metrics from every "
              "ready copy")
    explanation = ScalingExplanation(
        workflow_id="wf-q", at=time.time(), desired=2, decision="hold", reason=reason,
        signal=ScalingSignal(queue_depth=0.0, in_flight=3.0, ready_copies=2, fresh_copies=1, stale_copies=["c1"]),
        policy={"scale_in_queue": 1.0, "scale_in_s": 120.0, "max_replicas": 3, "target_concurrency": 32.0})
    served.store.note_scaling("ep-q", explanation.model_dump(mode="json"), 5.0)
    code, output = _run("workflow", "explain-scaling", "wf-q")
    assert code == 0, output
    assert "wf-q: hold → 2 copies" in output and reason in output
    assert "In flight per copy: 3.0; queue per copy: 0.0; mean TTFT: no fresh metrics" in output
    assert "with fresh metrics: 1; stale or silent: c1" in output
    assert "ScaleInQueue" in output and "MaxReplicas" in output and "TargetConcurrency" in output
    code, output = _run("workflow", "explain-scaling", "wf-q", "-o", "json")
    assert code == 0 and json.loads(output)["signal"]["stale_copies"] == ["c1"]
