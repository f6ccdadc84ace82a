"""A node agent's /metrics, read through its real HTTP port on loopback: the heartbeat age restarts when the
real API app accepts a heartbeat (and not when one fails), ranks are counted by state as the Supervisor
moves them, download bytes and rate follow the download activities' progress, only loopback is bound, and
BERTH_METRICS=off (or no --metrics-port) serves nothing."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from activities.download_meter import DownloadMeter
from activities.supervision import RankState, Supervisor
from berth.api_client import ApiClient
from berth.processes import free_port, write_pidfile
from berth.security import Identity
from node.agent import AgentConfig, NodeAgent
from node.node_metrics import NodeMetrics
from server.app import build_context, create_app

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[NodeMetrics, Supervisor, DownloadMeter, Clock, str]]:
    supervisor, downloads, clock = Supervisor("n1", tmp_path / "nodes" / "n1"), DownloadMeter(), Clock()
    metrics = NodeMetrics(supervisor, downloads, clock=clock)
    port = metrics.serve(0)
    try:
        yield metrics, supervisor, downloads, clock, f"http://127.0.0.1:{port}/metrics"
    finally:
        metrics.close()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(url, timeout=5)
    assert response.status_code == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def ranks(url: str) -> dict[str, float]:
    return {dict(labels)["state"]: value for (name, labels), value in scrape(url).items()
            if name == "berth_node_ranks"}


def test_ranks_are_counted_by_state_as_they_move(served: tuple[NodeMetrics, Supervisor, DownloadMeter, Clock, str],
                                                 tmp_path: Path) -> None:
    _, supervisor, _, _, url = served
    assert ranks(url) == dict.fromkeys((state.value for state in RankState), 0.0)
    ranks_dir = tmp_path / "nodes" / "n1" / "ranks"
    supervisor.rank_started(ranks_dir / "ep.copy-0-r0", rank=0)
    supervisor.rank_started(ranks_dir / "ep.copy-0-r1", rank=1)  # serves no HTTP: running once spawned
    supervisor.rank_started(ranks_dir / "ep.copy-1-r0", rank=0)
    assert ranks(url) == {**dict.fromkeys((s.value for s in RankState), 0.0), "starting": 2, "running": 1}
    supervisor.copy_state("ep.copy-0", RankState.RUNNING)  # wait_ready passed
    supervisor.copy_state("ep.copy-1", RankState.UNHEALTHY)  # /health failed
    supervisor.rank_ended(ranks_dir / "ep.copy-0-r1")
    supervisor.rank_ended(ranks_dir / "ep.copy-0-r1")  # ended once only
    found = ranks(url)
    assert (found["running"], found["unhealthy"], found["starting"], found["exited"]) == (1, 1, 0, 1)


def test_orphans_count_until_adopted_or_stopped(tmp_path: Path) -> None:
    node_dir = tmp_path / "nodes" / "n1"
    pidfile = node_dir / "ranks" / "ep.copy-0-r0" / "rank.json"
    pidfile.parent.mkdir(parents=True)
    write_pidfile(pidfile, os.getpid())  # a live process: this test's own
    supervisor = Supervisor("n1", node_dir)
    metrics = NodeMetrics(supervisor, DownloadMeter())
    url = f"http://127.0.0.1:{metrics.serve(0)}/metrics"
    try:
        orphans = supervisor.find_orphans()
        assert len(orphans) == 1 and ranks(url)["orphaned"] == 1
        supervisor.adopted.add(pidfile)  # as adopt() does: stop_unadopted then spares it
        asyncio.run(supervisor.stop_unadopted(orphans))
        assert ranks(url)["orphaned"] == 1
    finally:
        metrics.close()


def test_download_bytes_and_rate_follow_progress(
        served: tuple[NodeMetrics, Supervisor, DownloadMeter, Clock, str]) -> None:
    _, _, downloads, _, url = served
    with downloads.download() as first, downloads.download() as second:
        first.progress(500, 0.0)  # resumed: 500 bytes were on the volume already, not downloaded now
        first.progress(1500, 1000.0)
        second.progress(0, 0.0)
        second.progress(250, 250.0)
        figures = scrape(url)
        assert figures[("berth_node_download_bytes_total", ())] == 1250
        assert figures[("berth_node_download_bytes_per_second", ())] == 1250.0
        first.progress(1000, 10.0)  # a partial file restarted: nothing added
    figures = scrape(url)
    assert figures[("berth_node_download_bytes_total", ())] == 1250
    assert figures[("berth_node_download_bytes_per_second", ())] == 0.0  # idle


async def test_heartbeat_age_restarts_when_the_api_accepts_one(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    context = build_context(tmp_path / "api", "127.0.0.1:1")  # nothing here reaches Temporal
    config = AgentConfig(node_id="n1", state_dir=tmp_path / "node", api_url="http://api", token="-",
                         temporal_address="127.0.0.1:1", simulate_gpus="1x80GB")
    agent = NodeAgent(config)
    supervisor, clock = Supervisor("n1", agent.context.node_dir), Clock()
    metrics = NodeMetrics(supervisor, agent.context.downloads, clock=clock)
    url = f"http://127.0.0.1:{metrics.serve(0)}/metrics"
    age = ("berth_node_heartbeat_age_seconds", ())
    refused = ApiClient("http://api", "not-a-token", transport=httpx.ASGITransport(app=create_app(context)))
    accepted = ApiClient("http://api", context.signing.api_token(ADMIN),
                         transport=httpx.ASGITransport(app=create_app(context)))
    try:
        clock.now += 30
        assert (await asyncio.to_thread(scrape, url))[age] == 30  # none accepted yet: since the start
        beating = asyncio.create_task(agent.heartbeat_forever(refused, supervisor, metrics))
        await _until(lambda: "heartbeat failed" in caplog.text, 10)
        beating.cancel()
        assert (await asyncio.to_thread(scrape, url))[age] == 30  # refused: the age goes on
        beating = asyncio.create_task(agent.heartbeat_forever(accepted, supervisor, metrics))
        await _until(lambda: metrics.collector.last_heartbeat is not None, 10)
        beating.cancel()
        clock.now += 2.5
        assert (await asyncio.to_thread(scrape, url))[age] == 2.5
    finally:
        metrics.close()
        await refused.aclose()
        await accepted.aclose()


async def _until(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_only_loopback_is_bound(served: tuple[NodeMetrics, Supervisor, DownloadMeter, Clock, str]) -> None:
    metrics = served[0]
    assert metrics._server is not None and metrics._server.server_address[0] == "127.0.0.1"


def test_no_port_or_metrics_off_serves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = AgentConfig(node_id="n1", state_dir=tmp_path, api_url="http://api", token="-",
                       temporal_address="127.0.0.1:1", simulate_gpus="1x80GB")
    supervisor = Supervisor("n1", tmp_path / "nodes" / "n1")
    assert NodeAgent(base).start_metrics(supervisor) is None  # no --metrics-port: off
    monkeypatch.setenv("BERTH_METRICS", "off")
    port = free_port()
    given = AgentConfig(**{**base.__dict__, "metrics_port": port})
    assert NodeAgent(given).start_metrics(supervisor) is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    monkeypatch.setenv("BERTH_METRICS", "on")
    metrics = NodeAgent(given).start_metrics(supervisor)
    assert metrics is not None
    try:
        assert "berth_node_ranks" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        metrics.close()
