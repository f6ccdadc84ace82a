"""The scaling routes through the real API and store in process: before the autoscaler's first explanation
GET says why in one line; the control worker's PUT (administrators only) is kept on the endpoint row and
rewritten only when it changed or a few seconds passed; anyone who may read the workflow reads it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from berth.contracts.rollouts import ScalingExplanation, ScalingSignal
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow, WorkflowRow

PATH = "/v1/workflows/wf-1/scaling"


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    context.store.ensure_user("alice", org="acme", groups=["team"])
    workflow = WorkflowRow(id="wf-1", entry="vllm", owner="alice", org="acme", created_at=time.time(),
                           definition="", endpoint_id="ep-1")
    endpoint = EndpointRow(id="ep-1", workflow_id="wf-1", service="vllm", scope="group", owner="alice",
                           org="acme", groups=["team"], model_id="m", created_at=time.time(),
                           annotations={"pool": True})
    context.store.add_workflow(workflow, {}, endpoint)
    return context


@pytest.fixture
async def api(context: ServerContext) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)),
                                 base_url="http://api") as client:
        yield client


def _as(context: ServerContext, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {context.signing.api_token(context.store.identity(user), 600)}"}


def _explanation(at: float, reason: str) -> dict[str, object]:
    return ScalingExplanation(workflow_id="wf-1", at=at, desired=2, decision="hold", reason=reason,
                              signal=ScalingSignal(ready_copies=2, fresh_copies=1, stale_copies=["c1"]),
                              policy={"scale_in_queue": 1.0}).model_dump(mode="json")


async def test_recorded_then_read_with_bounded_writes(api: httpx.AsyncClient, context: ServerContext) -> None:
    admin, alice = _as(context, "admin"), _as(context, "alice")
    missing = await api.get(PATH, headers=alice)
    assert missing.status_code == 404
    assert missing.json()["detail"] == ("the autoscaler has not sized wf-1 yet: its pool sets no autoscaling "
                                        "thresholds, or the control worker is not running")
    refused = await api.put("/v1/internal/workflows/wf-1/scaling", json=_explanation(100, "x"), headers=alice)
    assert refused.status_code == 403
    for at, reason in ((100, "stale c1"), (101, "stale c1"), (102, "stale c1, again")):
        put = await api.put("/v1/internal/workflows/wf-1/scaling", json=_explanation(at, reason), headers=admin)
        assert put.status_code == 204, put.text
    shown = ScalingExplanation.model_validate((await api.get(PATH, headers=alice)).json())
    assert (shown.at, shown.reason, shown.signal.stale_copies) == (102, "stale c1, again", ["c1"])
    await api.put("/v1/internal/workflows/wf-1/scaling", json=_explanation(103, "stale c1, again"), headers=admin)
    assert (await api.get(PATH, headers=alice)).json()["at"] == 102  # unchanged within 5 s: not written
    await api.put("/v1/internal/workflows/wf-1/scaling", json=_explanation(108, "stale c1, again"), headers=admin)
    assert (await api.get(PATH, headers=alice)).json()["at"] == 108
