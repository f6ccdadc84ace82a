"""The control plane's `/metrics` through the real app and store: copies, nodes and GPUs as the store holds
them, placement decisions and blocked copies, API latency by route template, who may scrape, metrics off;
and the workflow-phase reading (cached, bounded, a failing Temporal keeps the last figures)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from berth.settings import admin_user
from server.app import build_context, create_app
from server.context import ServerContext
from server.control_metrics import PhaseCache, RequestTimer, temporal_phases

pytestmark = pytest.mark.timeout(120)

INVENTORY = {"address": "127.0.0.1", "engine": "simulator",
             "gpus": [{"index": i, "name": "Simulated GPU 80GB", "memory_gb": 80} for i in range(2)]}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    return build_context(tmp_path, "127.0.0.1:1")  # no Temporal: phases are read by the last tests


def _api(context: ServerContext, client: tuple[str, int] = ("127.0.0.1", 4000),
         token: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context), client=client),
                             base_url="http://api", headers=headers)


@pytest.fixture
async def admin_api(context: ServerContext) -> AsyncIterator[httpx.AsyncClient]:
    token = context.signing.api_token(context.store.identity(admin_user()), 600)
    async with _api(context, token=token) as api:
        yield api


async def _scrape(api: httpx.AsyncClient) -> tuple[Samples, str]:
    answer = await api.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, answer.text


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def _reserve(api: httpx.AsyncClient, copy_id: str, gpus: int) -> dict[str, Any]:
    answer = await api.post("/v1/internal/reservations",
                            json={"workflow_id": "wf", "copy_id": copy_id, "nodes": 1, "gpus_per_node": gpus})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


async def test_the_gauges_show_the_stores_copies_nodes_and_gpus(context: ServerContext,
                                                                admin_api: httpx.AsyncClient) -> None:
    context.store.heartbeat_node("n0", INVENTORY, port_start=30000, held=[])
    context.store.heartbeat_node("n1", INVENTORY, port_start=31000, held=[])
    for index in range(3):
        assert (await _reserve(admin_api, f"wf.copy-{index}", 1))["placement"] is not None
    context.store.set_draining("n1", True)
    context.store.placements.publish("wf", "ep", "wf.copy-1", "http://127.0.0.1:30001", ready=False)
    context.store.placements.publish("wf", "ep", "wf.copy-2", "http://127.0.0.1:30002", ready=True)
    samples, _text = await _scrape(admin_api)
    assert [_value(samples, "berth_copies", state=s) for s in ("reserved", "starting", "ready", "draining")] \
        == [1, 1, 1, 0]
    held = {n: sum(1 for a in context.store.placements.allocations() if a.node_id == n) for n in ("n0", "n1")}
    assert sum(held.values()) == 3
    for node, reserved in held.items():  # the policy chose the nodes; the gauges say what the store holds
        assert _value(samples, "berth_node_gpus", node=node, state="reserved") == reserved
        assert _value(samples, "berth_node_gpus", node=node, state="free") == 2 - reserved
    assert [_value(samples, "berth_nodes", state=s) for s in ("ready", "draining", "offline")] == [1, 1, 0]
    assert _value(samples, "berth_placement_decisions_total", outcome="placed") == 3
    assert _value(samples, "berth_reservation_duration_seconds_count") == 3


async def test_a_refused_reserve_counts_blocked_until_the_copy_is_released(context: ServerContext,
                                                                           admin_api: httpx.AsyncClient) -> None:
    context.store.heartbeat_node("n0", INVENTORY, port_start=30000, held=[])
    assert (await _reserve(admin_api, "wf.copy-big", 8))["blocked_reason"]
    samples, _text = await _scrape(admin_api)
    assert _value(samples, "berth_placement_decisions_total", outcome="blocked") == 1
    assert _value(samples, "berth_placement_decisions_total", outcome="placed") == 0
    assert _value(samples, "berth_copies_blocked") == 1
    assert (await admin_api.delete("/v1/internal/reservations/wf.copy-big")).status_code == 204
    samples, _text = await _scrape(admin_api)
    assert _value(samples, "berth_copies_blocked") == 0


async def test_api_latency_is_labelled_by_route_template_never_the_raw_path(admin_api: httpx.AsyncClient) -> None:
    assert (await admin_api.get("/v1/workflows/wf-secret-id-42")).status_code == 404
    assert (await admin_api.get("/no/such/path-77")).status_code == 404
    assert (await admin_api.get("/healthz")).status_code == 200
    samples, text = await _scrape(admin_api)
    count = "berth_api_request_duration_seconds_count"
    assert _value(samples, count, route="/v1/workflows/{workflow_id}", method="GET", code="4xx") == 1
    assert _value(samples, count, route="unmatched", method="GET", code="4xx") == 1
    assert _value(samples, count, route="/healthz", method="GET", code="2xx") == 1
    assert "wf-secret-id-42" not in text and "path-77" not in text


async def test_a_remote_caller_needs_an_administrators_token(context: ServerContext) -> None:
    remote = ("10.1.2.3", 5555)
    async with _api(context, client=remote) as anonymous:
        refused = await anonymous.get("/metrics")
    assert refused.status_code == 401 and "loopback callers and administrators" in refused.json()["detail"]
    alice = context.store.ensure_user("alice", org="default", groups=["default"])
    async with _api(context, client=remote, token=context.signing.api_token(alice, 600)) as user:
        refused = await user.get("/metrics")
    assert refused.status_code == 403 and "loopback callers and administrators" in refused.json()["detail"]
    admin = context.signing.api_token(context.store.identity(admin_user()), 600)
    async with _api(context, client=remote, token=admin) as administrator:
        assert (await administrator.get("/metrics")).status_code == 200


async def test_metrics_off_answers_404_and_times_nothing(context: ServerContext,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_METRICS", "off")
    app = create_app(context)
    assert all(middleware.cls is not RequestTimer for middleware in app.user_middleware)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
        answer = await api.get("/metrics")
    assert answer.status_code == 404 and answer.json()["detail"] == "Metrics are off (BERTH_METRICS=off)"


async def test_an_unreachable_temporal_never_fails_the_scrape(admin_api: httpx.AsyncClient) -> None:
    samples, _text = await _scrape(admin_api)
    assert _value(samples, "berth_workflow_phase_reads_failed_total") == 1
    assert not [key for key in samples if key[0] == "berth_workflows"]  # never read: no figures, no made-up zeros


async def test_phases_are_cached_and_a_failure_keeps_the_last_figures() -> None:
    now = [100.0]
    answers: list[Mapping[str, int] | Exception] = [{"ready": 2, "scheduling": 1}, RuntimeError("down")]
    calls = []

    async def reader() -> Mapping[str, int]:
        calls.append(now[0])
        answer = answers[min(len(calls) - 1, len(answers) - 1)]
        if isinstance(answer, Exception):
            raise answer
        return answer

    registry = CollectorRegistry()
    failures = Counter("failures", "", registry=registry)
    cache = PhaseCache(reader, failures, clock=lambda: now[0])
    await cache.refresh()
    now[0] += 9.9
    await cache.refresh()  # inside PHASE_CACHE_S: Temporal is not asked again
    assert calls == [100.0] and cache.figures["ready"] == 2 and cache.figures["stopping"] == 0
    now[0] += 0.2
    await cache.refresh()
    assert len(calls) == 2 and cache.figures["ready"] == 2 and cache.figures["scheduling"] == 1
    assert registry.get_sample_value("failures_total") == 1


class _Execution:
    def __init__(self, workflow_id: str) -> None:
        self.id = workflow_id


class _Status:
    def __init__(self, phase: str) -> None:
        from berth.contracts.workflows import Phase

        self.phase = Phase(phase)


class _Handle:
    def __init__(self, client: _FakeTemporal, workflow_id: str) -> None:
        self.client, self.workflow_id = client, workflow_id

    async def query(self, _query: Any, rpc_timeout: Any = None) -> _Status:
        self.client.queried.append(self.workflow_id)
        if self.workflow_id == "wf-silent":
            raise TimeoutError("no worker")
        return _Status(self.client.phases[self.workflow_id])


class _FakeTemporal:
    """Temporal's client as the phase reader uses it: a visibility listing and a status query per workflow."""

    def __init__(self, phases: dict[str, str]) -> None:
        self.phases = phases
        self.queried: list[str] = []
        self.listed_with = ""

    async def list_workflows(self, query: str) -> AsyncIterator[_Execution]:
        self.listed_with = query
        for workflow_id in [*self.phases, "wf-silent"]:
            yield _Execution(workflow_id)

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return _Handle(self, workflow_id)


async def test_the_temporal_reader_counts_running_pools_by_phase() -> None:
    fake = _FakeTemporal({"wf-a": "ready", "wf-b": "ready", "wf-c": "scheduling"})

    async def client() -> _FakeTemporal:
        return fake

    counts = await temporal_phases(client)()
    assert dict(counts) == {"ready": 2, "scheduling": 1, "unknown": 1}
    assert "ExecutionStatus = 'Running'" in fake.listed_with and "ServiceWorkflow" in fake.listed_with
    assert sorted(fake.queried) == ["wf-a", "wf-b", "wf-c", "wf-silent"]
