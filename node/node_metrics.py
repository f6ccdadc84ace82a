"""NodeMetrics: one node agent's Prometheus figures (its own CollectorRegistry) and the loopback-only HTTP
server that serves them at /metrics on `berth node --metrics-port`.

Read at each scrape, nothing per event: the heartbeat age from the last heartbeat the API accepted, the
ranks by state from the Supervisor, the download bytes and rate from the context's DownloadMeter. Labels
are a fixed enum (RankState) only. Names and labels are listed in docs/operations.md."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from activities.download_meter import DownloadMeter
from activities.supervision import Supervisor

log = logging.getLogger("berth.node")
# Loopback only: the figures name nothing secret, but no remote caller has any business on an agent's port
# (a remote Prometheus scrapes through a local agent or an SSH tunnel, as for the endpoint proxy).
METRICS_HOST = "127.0.0.1"


class NodeCollector(Collector):
    """The four figures, computed when Prometheus asks."""

    def __init__(self, supervisor: Supervisor, downloads: DownloadMeter, clock: Callable[[], float]) -> None:
        self.supervisor = supervisor
        self.downloads = downloads
        self.clock = clock
        self.started = clock()
        self.last_heartbeat: float | None = None

    def collect(self) -> Iterable[Metric]:
        since = self.last_heartbeat if self.last_heartbeat is not None else self.started
        yield GaugeMetricFamily("berth_node_heartbeat_age_seconds",
                                "Seconds since the last heartbeat the API accepted (since the agent started, "
                                "before the first)", value=max(self.clock() - since, 0.0))
        ranks = GaugeMetricFamily("berth_node_ranks", "Ranks this agent supervises, by state (exited: ended "
                                  "during this agent's life)", labels=("state",))
        for state, count in self.supervisor.rank_counts().items():
            ranks.add_metric((state.value,), count)
        yield ranks
        yield CounterMetricFamily("berth_node_download_bytes", "Weight bytes this node downloaded",
                                  value=self.downloads.total_bytes)
        yield GaugeMetricFamily("berth_node_download_bytes_per_second",
                                "Current download rate, all running downloads together (0 when idle)",
                                value=self.downloads.bytes_per_second)


class NodeMetrics:
    """A node agent's registry, and its /metrics server while `serve` has it running."""

    def __init__(self, supervisor: Supervisor, downloads: DownloadMeter,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.collector = NodeCollector(supervisor, downloads, clock)
        self.registry.register(self.collector)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def heartbeat_accepted(self) -> None:
        self.collector.last_heartbeat = self.collector.clock()

    def serve(self, port: int) -> int:
        """Serve /metrics on 127.0.0.1:`port` in a daemon thread; returns the port bound."""
        self._server, self._thread = start_http_server(port, addr=METRICS_HOST, registry=self.registry)
        bound = int(self._server.server_address[1])
        log.info("node metrics on http://%s:%d/metrics", METRICS_HOST, bound)
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

