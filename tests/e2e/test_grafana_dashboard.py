"""docs/grafana/berth.json: it loads, every panel queries something through the `${DS_PROMETHEUS}` input,
every metric it names is one Berth exports (issue 19's names), and a real Prometheus accepts each panel's
PromQL expression."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.prometheus_server import PrometheusServer

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "berth.json"
# The metric names Berth's processes export (docs/operations.md, "Metrics (Prometheus)"), histograms as
# their _bucket/_sum/_count series.
EXPORTED = {
    *(f"berth_proxy_{name}" for name in (
        "requests_total", "streamed_chunks_total", "refusals_total", "upstream_errors_total", "retries_total",
        "held_requests", "wakeups_total")),
    *(f"berth_proxy_{name}_{part}" for name in ("request_duration_seconds", "time_to_first_byte_seconds",
                                                 "added_latency_seconds") for part in ("bucket", "sum", "count")),
    "berth_workflows", "berth_copies", "berth_placement_decisions_total", "berth_copies_blocked",
    *(f"berth_reservation_duration_seconds_{part}" for part in ("bucket", "sum", "count")),
    "berth_node_gpus", "berth_nodes",
    *(f"berth_api_request_duration_seconds_{part}" for part in ("bucket", "sum", "count")),
    "berth_node_heartbeat_age_seconds", "berth_node_ranks", "berth_node_download_bytes_total",
    "berth_node_download_bytes_per_second",
}
NAME = re.compile(r"\bberth_[a-z_]+")


def _panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36
    assert any(item["name"] == "DS_PROMETHEUS" for item in dashboard["__inputs"])
    return list(dashboard["panels"])


def _expressions() -> list[str]:
    return [target["expr"] for panel in _panels() for target in panel["targets"]]


def test_every_panel_queries_an_exported_metric_through_the_datasource_input() -> None:
    panels = _panels()
    titles = " ".join(panel["title"].lower() for panel in panels)
    for wanted in ("requests/s", "p99", "added latency", "errors", "gpus", "copies", "wake-ups", "held"):
        assert wanted in titles, wanted
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"] and all(target["expr"].strip() for target in panel["targets"]), panel["title"]
    named = {name for expression in _expressions() for name in NAME.findall(expression)}
    assert named and named <= EXPORTED, named - EXPORTED


@pytest.mark.prometheus
def test_a_real_prometheus_accepts_every_panels_expression(tmp_path: Path) -> None:
    prometheus = PrometheusServer(tmp_path / "prometheus", {}).start()
    try:
        for expression in _expressions():
            prometheus.query(expression)  # asserts the answer's status is success
    finally:
        prometheus.stop()
