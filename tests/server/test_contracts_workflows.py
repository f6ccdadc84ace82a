"""The workflow answers that need Temporal (describe, scale) are built from the pool's status parts, which
the ground floor defines once for both wires (Temporal's `status` query and REST's `describe`). Pinned here:
the parts' JSON shape (running workflows' histories and the previous release's callers read it), and the
answer as the route builds it passing through its model unchanged (FastAPI's `exclude_unset` encoding) and
reading back in the CLI through `wire` to the same JSON, key order included."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from berth.api_client import ApiClient
from berth.contracts import WorkflowDescription, WorkflowLogs, WorkflowScaled, wire
from berth.errors import BerthError
from workflows.payloads import (
    CopyInfo,
    CopyStatus,
    DownloadProgress,
    Event,
    Phase,
    PoolStatus,
    ScaleResult,
    WeightsResult,
)


def _as_served(model: type[BaseModel], answer: dict[str, Any]) -> str:
    """What FastAPI sends for `answer` from a route declaring `model` with `response_model_exclude_unset`."""
    return json.dumps(model.model_validate(answer).model_dump(mode="json", by_alias=True, exclude_unset=True))


def _described(status: dict[str, Any], download: dict[str, Any] | None) -> dict[str, Any]:
    """`GET /v1/workflows/{id}` as server/routes/workflows.py::describe_workflow assembles it."""
    answer: dict[str, Any] = {
        "id": "wf-1", "entry": "vllm", "owner": "alice", "created_at": 1796000000.25,
        "endpoint": {"id": "ep-1", "url": "http://proxy/endpoints/ep-1", "discoverable": False,
                     "openai_compatible": True, "note": "not discoverable by a gateway: started with Proxy=true",
                     "token_lapses_at": 1796600000.0},
        "status": "running"}
    if download is not None:
        answer["download"] = download
    answer.update(status)
    return answer


def _status() -> PoolStatus:
    at = datetime(2026, 12, 2, 7, 0, 1, 500000, tzinfo=UTC)
    return PoolStatus(
        workflow_id="wf-1", phase=Phase.READY, desired_copies=2,
        copies=(CopyInfo(copy_id="wf-1.copy-0", status=CopyStatus.READY, url="http://10.0.0.1:8000",
                              nodes=("n0", "n1"), detail="serving"),
                  CopyInfo(copy_id="wf-1.copy-1", status=CopyStatus.SCHEDULING)),
        events=(Event(at=at, kind="copy-ready", message="copy 0 ready", copy_id="wf-1.copy-0"),
                Event(at=at, kind="scaled", message="desired 1 → 2")),
        last_error="copy 1: no node has 2 free GPUs",
        weights=WeightsResult(model_dir="/weights/qwen", bytes_total=1200, bytes_transferred=1200, cache_hit=True))


@pytest.mark.parametrize("download", [None, DownloadProgress(bytes_done=10, bytes_total=100).model_dump(mode="json"),
                                      DownloadProgress(bytes_done=10, bytes_total=100, rate_bps=2.5e6, eta_s=36,
                                                       files_done=1, files_total=3).model_dump(mode="json")])
def test_a_description_passes_its_model_unchanged(download: dict[str, Any] | None) -> None:
    answer = _described(_status().model_dump(mode="json"), download)
    assert _as_served(WorkflowDescription, answer) == json.dumps(answer)
    read = WorkflowDescription.model_validate_json(_as_served(WorkflowDescription, answer))
    assert json.dumps(wire(read)) == json.dumps(answer)
    assert read.copies is not None and read.copies[0].nodes == ("n0", "n1")
    assert read.weights is not None and read.weights.cache_hit


def test_the_status_parts_keep_their_json_shape() -> None:
    """Field names, order and encodings: a recorded history and a caller of the previous release read these.
    The old names of the renamed fields come last, with the same values."""
    status = _status().model_dump(mode="json")
    assert list(status) == ["workflow_id", "phase", "desired_copies", "copies", "events", "last_error", "weights",
                            "revision", "rollout", "rolled_back", "desired_replicas", "replicas"]
    assert status["rolled_back"] == []  # added after the rollout (issue 31): an older answer reads without it
    assert status["desired_replicas"] == status["desired_copies"] == 2 and status["replicas"] == status["copies"]
    assert status["phase"] == "ready"
    assert status["copies"][0] == {"copy_id": "wf-1.copy-0", "status": "ready", "url": "http://10.0.0.1:8000",
                                   "nodes": ["n0", "n1"], "detail": "serving", "revision": 1}
    # `ended` added after (issue 34: the rank that ended a copy, for `berth explain failure`): an older event reads
    # without it.
    assert status["events"][0] == {"at": "2026-12-02T07:00:01.500000Z", "kind": "copy-ready",
                                   "message": "copy 0 ready", "copy_id": "wf-1.copy-0", "ended": None}
    older = {key: value for key, value in status["events"][0].items() if key != "ended"}
    assert Event.model_validate(older).ended is None
    assert status["weights"] == {"model_dir": "/weights/qwen", "bytes_total": 1200, "bytes_transferred": 1200,
                                 "cache_hit": True, "dry_run": False, "digest": None, "model": None}
    assert DownloadProgress(bytes_done=10, bytes_total=100, rate_bps=80).model_dump(mode="json") == {
        "bytes_done": 10, "bytes_total": 100, "rate_bps": 80, "eta_s": None, "files_done": 0, "files_total": 0}


def test_a_status_of_the_previous_release_reads_under_its_old_names() -> None:
    """A worker not yet upgraded answers the query with `desired_replicas` and `replicas` only."""
    old = _status().model_dump(mode="json")
    del old["desired_copies"], old["copies"]
    read = PoolStatus.model_validate_json(json.dumps(old))
    assert read == _status() and read.desired_copies == 2 and read.copies[1].status is CopyStatus.SCHEDULING
    described = WorkflowDescription.model_validate(_described(old, None))
    assert described.copies == _status().copies and described.desired_copies == 2


def test_a_description_whose_status_query_failed_says_so_and_nothing_more() -> None:
    answer = _described({"phase": "unknown", "note": "could not query the workflow (RPCError); is the control "
                                                     "worker up?"}, None)
    del answer["endpoint"]["note"], answer["endpoint"]["token_lapses_at"]
    assert _as_served(WorkflowDescription, answer) == json.dumps(answer)
    read = WorkflowDescription.model_validate(answer)
    assert read.phase == "unknown" and read.events is None and read.endpoint.note is None


def test_a_scale_answer_passes_its_model_unchanged() -> None:
    answer = {"id": "wf-1", **ScaleResult(previous=1, desired=3, message="scaling out").model_dump(mode="json")}
    assert _as_served(WorkflowScaled, answer) == json.dumps(answer)


def test_a_log_answer_keeps_its_copy_field() -> None:
    """`copy` would hide BaseModel.copy as a field name: the model names it copy_name, the wire keeps `copy`."""
    answer = {"job": "vllm-rank-0", "copy": "wf-1.copy-0", "text": "INFO serving"}
    assert _as_served(WorkflowLogs, answer) == json.dumps(answer)
    assert WorkflowLogs.model_validate(answer).copy_name == "wf-1.copy-0"
    assert _as_served(WorkflowLogs, {"jobs": []}) == json.dumps({"jobs": []})


async def test_an_answer_that_is_not_its_model_is_a_berth_error() -> None:
    """A refresh loop's `except BerthError` (the endpoint proxy, the model gateway) covers a malformed
    answer too, and the error names no value (a copy's key could be one)."""
    def api(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"endpoints": [{"id": "ep-1", "pool": [{"api_key": "sk-secret"}]}]})

    async with ApiClient("http://api.test", "token", transport=httpx.MockTransport(api)) as client:
        with pytest.raises(BerthError, match="not a RoutesTable") as raised:
            await client.routes()
    assert "sk-secret" not in str(raised.value)
