"""The operations benchmark on a small generated cluster and audit store: capacity and explain placement see every
node, and usage counts every request the bulk-written tallies hold, by every key asked (by group each user once per
group, so its total is checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.operations import bench_cluster, bench_usage

pytestmark = pytest.mark.timeout(120)


def test_capacity_and_explain_placement_read_every_node(tmp_path: Path) -> None:
    result = bench_cluster(tmp_path, nodes=20, placed=10)
    assert result["nodes_ready_seen"] == 20
    assert result["node_verdicts"] == 2 * 20  # the placed copy and the next one, each judged on every node
    assert result["capacity"]["p50_s"] > 0 and result["explain_placement"]["bytes"] > 0


def test_usage_counts_every_request_the_tallies_hold(tmp_path: Path) -> None:
    result = bench_usage(tmp_path, None, records=20_000)
    assert result["records"] == 20_000 and result["tallies"] > 0
    assert set(result["requests_counted"].values()) == {10_000}  # an ATTEMPT and an outcome a request
    assert all(figure["p50_s"] > 0 for figure in result["usage"].values())
