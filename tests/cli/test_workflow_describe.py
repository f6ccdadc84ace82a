"""Issue 31, item 12: `workflow describe` says what its phase means for a caller — a failed workflow is not
"Not ready yet." (printed under `phase failed` before), nor is a stopped or scaled-to-zero one."""

from __future__ import annotations

import pytest

from berth.contracts import WorkflowDescription
from cli import workflow
from cli.common import console


def _printed(phase: str, last_error: str | None = None) -> str:
    info = WorkflowDescription(id="wf-1", entry="vLLM", owner="alice", created_at=0.0, phase=phase,
                               status="RUNNING", last_error=last_error,
                               endpoint={"id": "ep-1", "url": "https://proxy/endpoints/ep-1"})
    with console.capture() as captured:
        workflow._describe(info)
    return captured.get()


@pytest.mark.parametrize(("phase", "line"), [
    ("failed", "Failed: it serves nothing; the last error below says why."),
    ("stopped", "Stopped: it serves nothing."),
    ("scaled_to_zero", "Scaled to zero: the next request wakes it."),
    ("ready", "Ready: service running and health check passed."),
    ("starting", "Not ready yet."),
])
def test_the_line_under_the_phase_says_what_it_means(phase: str, line: str) -> None:
    printed = _printed(phase, last_error="rank 0 exited with status 1" if phase == "failed" else None)
    assert line in printed
    if phase != "starting":
        assert "Not ready yet." not in printed
