"""The nodes page over the real app (in-process): the capacity strip, a row per node with its GPUs and
their holder, the live fragment, and drain/undrain for administrators only (the API's refusal for bob)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.pages.nodes import Capacity
from server.context import ServerContext
from server.store.tables import AllocationRow
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token


def _gpu(index: int) -> dict[str, object]:
    return {"index": index, "name": "NVIDIA H100", "memory_gb": 80, "memory_free_gb": 79.5}


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = console_context(tmp_path / "state")
    # node-a reports a site and failure domain (issue 36), node-b none.
    for node_id, gpus, labels in (("node-a", 3, {"berth.site": "eu-west", "berth.failure-domain": "rack-a"}),
                                  ("node-b", 1, {})):
        context.store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "vllm", "cpus": 16,
                                               "memory_gb": 128, "gpus": [_gpu(i) for i in range(gpus)],
                                               "labels": labels}, port_start=30000)
    with context.store.session() as s:
        s.add(AllocationRow(node_id="node-a", gpu_index=1, copy_id="wf-x.copy-0"))
    return context


def test_the_strip_width_is_in_steps_of_five() -> None:
    assert Capacity(free=3, total=4).used_width == 25
    assert Capacity(free=2, total=3).used_width == 35  # 33.3 % rounds to the nearest step
    assert Capacity(free=0, total=0).used_width == 0


async def test_an_empty_cluster_says_what_to_do(tmp_path: Path) -> None:
    context = console_context(tmp_path / "empty")
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/nodes")).text
        assert 'id="capacity">0 of 0 GPUs free' in page and 'class="empty"' in page


async def test_the_nodes_page_shows_capacity_gpus_and_holders(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        page = (await client.get("/ui/nodes")).text
        assert 'id="capacity">3 of 4 GPUs free' in page
        assert 'class="used w-25"' in page and 'class="free w-75"' in page and "style=" not in page
        assert 'tr data-id="node-a"' in page and 'tr data-id="node-b"' in page
        assert '<td class="holder">wf-x.copy-0</td>' in page and page.count('<td class="holder">free</td>') == 3
        assert page.count('class="hint site"') == 1 and "site eu-west · failure domain rack-a" in page
        assert 'hx-get="/ui/nodes/live" hx-trigger="every 3s"' in page
        live = (await client.get("/ui/nodes/live", headers={"HX-Request": "true"})).text
        assert live.startswith('<div id="live"') and "<html" not in live and "3 of 4 GPUs free" in live
        drained = await client.post("/ui/nodes/node-b/draining", data={"csrf": csrf_of(page), "draining": "true"})
        assert drained.status_code == 303 and drained.headers["location"] == "/ui/nodes"
        again = (await client.get("/ui/nodes")).text
        assert 'name="draining" value="false"' in again and "Undrain" in again


async def test_bob_sees_no_drain_button_and_the_api_refuses_him(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/nodes")).text
        assert "/draining" not in page and 'tr data-id="node-a"' in page
        refused = await client.post("/ui/nodes/node-a/draining", data={"csrf": csrf_of(page), "draining": "true"})
        assert refused.status_code == 403 and 'role="alert"' in refused.text


async def test_the_nodes_page_shows_gpu_readings_and_the_gpus_placement_skips(tmp_path: Path) -> None:
    """Under the cluster's defaults (max_gpu_temp_c 90, reject_ecc on): a hot GPU and one with ECC errors."""
    context = console_context(tmp_path / "health")
    gpus = [{**_gpu(0), "temperature_c": 93, "power_w": 612.5}, {**_gpu(1), "temperature_c": 41, "ecc_uncorrected": 1},
            {**_gpu(2), "temperature_c": 38, "ecc_uncorrected": 0}]
    context.store.heartbeat_node("node-h", {"address": "127.0.0.1", "engine": "vllm", "gpus": gpus}, port_start=30000)
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/nodes/live", headers={"HX-Request": "true"})).text
        assert "<td>93</td>" in page and "<td>612.5</td>" in page
        assert '<td class="health">skipped: 93 °C, over the cluster&#39;s max_gpu_temp_c (90 °C)</td>' in page
        assert '<td class="health">skipped: 1 uncorrected ECC error(s) since its last reset (reject_ecc)</td>' in page
        assert page.count('<td class="health">ok</td>') == 1
