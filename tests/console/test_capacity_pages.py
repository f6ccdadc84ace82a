"""The capacity page over the real app (in-process): the totals and node states, a chart spec per node and per GPU
model whose stacked series add up to each bar's GPUs, the tables, what fits now, the live fragment, the navigation
link, and other users' copies unnamed; and the chart specs' own checks."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from console.charts import BarChart, LineChart, Series
from server.context import ServerContext
from server.store.tables import AllocationRow
from tests.console.app_support import browser, console_context, sign_in, user_token

pytestmark = pytest.mark.timeout(60)


def _gpu(index: int, memory_gb: int) -> dict[str, object]:
    return {"index": index, "name": f"NVIDIA {memory_gb}GB", "memory_gb": memory_gb, "memory_free_gb": memory_gb}


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """node-a: 3×80 GB, one held by the administrator's copy; node-b: 1×24 GB, drained."""
    context = console_context(tmp_path / "state")
    for node_id, gpus, memory in (("node-a", 3, 80), ("node-b", 1, 24)):
        context.store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "vllm", "cpus": 16,
                                               "memory_gb": 128, "gpus": [_gpu(i, memory) for i in range(gpus)]},
                                     port_start=30000)
    with context.store.session() as s:
        s.add(AllocationRow(node_id="node-a", gpu_index=1, copy_id="wf-x.copy-0"))
    context.store.set_draining("node-b", True)
    return context


def _spec(page: str, chart_id: str) -> dict[str, Any]:
    found = re.search(rf"""<figure class="chart" id="{chart_id}" data-chart='([^']*)'>""", page)
    assert found, f"no chart {chart_id}"
    return json.loads(html.unescape(found.group(1)))


async def test_the_capacity_page_draws_bars_and_tables_from_the_api(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        page = (await client.get("/ui/capacity")).text
    assert '<a href="/ui/capacity" aria-current="page">Capacity</a>' in page
    assert '<script src="/ui/static/charts.js" defer></script>' in page and "style=" not in page
    assert "<strong>2</strong> of 4 GPUs available now (160 of 264 GB)" in page
    assert "1 reserved, 3 free" in page and "1 ready" in page and "1 draining" in page
    gpus = _spec(page, "chart-node-gpus")
    assert (gpus["kind"], gpus["categories"]) == ("bar", ["node-a", "node-b"])
    by_name = {s["name"]: s["values"] for s in gpus["series"]}
    assert by_name == {"serving": [0, 0], "reserved": [1, 0], "available": [2, 0], "free, not taking copies": [0, 1]}
    memory = {s["name"]: s["values"] for s in _spec(page, "chart-node-memory")["series"]}
    assert memory == {"held": [80.0, 0.0], "available": [160, 0], "free, not taking copies": [0.0, 24.0]}
    models = _spec(page, "chart-model-gpus")
    assert models["categories"] == ["NVIDIA 80GB (80 GB)", "NVIDIA 24GB (24 GB)"]
    assert 'tr data-id="node-a"' in page and "wf-x.copy-0" in page and 'id="capacity-entries"' in page
    assert 'tr data-id="GPT-OSS 20B"' in page


async def test_a_user_sees_the_figures_with_other_users_copies_unnamed(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/capacity")).text
        live = (await client.get("/ui/capacity/live", headers={"HX-Request": "true"})).text
    assert "wf-x.copy-0" not in page and "(another user)" in page
    assert live.startswith('<div id="live" hx-get="/ui/capacity/live" hx-trigger="every 10s"') and "<html" not in live
    assert 'id="chart-node-gpus"' in live


async def test_an_empty_cluster_says_what_to_do(tmp_path: Path) -> None:
    context = console_context(tmp_path / "empty")
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/capacity")).text
    assert 'class="empty"' in page and "<strong>0</strong> of 0 GPUs available" in page
    assert "chart-node-gpus" not in page


def test_a_chart_spec_refuses_series_that_do_not_match_its_axis() -> None:
    with pytest.raises(ValueError, match="2 values for 3 categories"):
        BarChart("t", "GPUs", ["a", "b", "c"], [Series("s", [1, 2])])
    with pytest.raises(ValueError, match="1 to 6 series"):
        LineChart("t", "ms", [0.0], [Series(str(n), [1.0]) for n in range(7)])
    spec = LineChart("t", "ms", [60.0, 120.0], [Series("p50", [1.5, None], "ok")]).spec()
    assert spec == {"kind": "line", "title": "t", "unit": "ms", "x": [60.0, 120.0],
                    "series": [{"name": "p50", "values": [1.5, None], "tone": "ok"}]}
