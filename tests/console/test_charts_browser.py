"""The console's charts in a real browser (console/static/charts.js under the console's CSP): the capacity page's
bars, the endpoint page's lines and the usage page's lines are drawn as SVG, with legends, axes and tooltips, a
window with nothing recorded says so, an htmx refresh draws the new part's charts again, and the page reports no
error. The API is served in process on loopback (no Temporal, no stack: the charts need only the store's figures),
with chromium from conftest.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from berth.contracts import AuditBatch, AuditPhase, AuditRecord
from server.store.tables import AllocationRow
from tests.cli.loopback_api import served_app
from tests.console.app_support import console_context, start, user_token
from tests.console.browser import console_errors, shot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def _gpu(index: int) -> dict[str, object]:
    return {"index": index, "name": "NVIDIA H100", "memory_gb": 80, "memory_free_gb": 80}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """The console's base URL, bob's token, and bob's endpoint with one busy minute in its last hour."""
    context = console_context(Path(tmp_path_factory.mktemp("charts")))
    for node_id, gpus in (("gpu-1", 4), ("gpu-2", 2), ("cpu-1", 0)):
        context.store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "vllm", "cpus": 8, "memory_gb": 32,
                                               "gpus": [_gpu(i) for i in range(gpus)]}, port_start=30000)
    with context.store.session() as s:
        s.add(AllocationRow(node_id="gpu-1", gpu_index=0, copy_id="wf-x.copy-0"))
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    minute = int(time.time() // 60) - 5
    records = []
    for index in range(30):
        at = minute * 60.0 + index
        records += [AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id=f"r{index}", endpoint_id=endpoint_id,
                                user="bob"),
                    AuditRecord(at=at + 0.5, phase=AuditPhase.SUCCESS, request_id=f"r{index}", status=200,
                                latency_ms=50.0 + 10 * index, endpoint_id=endpoint_id, user="bob", tokens_in=2,
                                tokens_out=3)]
    context.store.audit.append_batch(AuditBatch.of("proxy-1", 1, records))
    with served_app(context) as url:
        yield url + "/ui", user_token(context, "bob"), endpoint_id


def _signed_in(browser_context: BrowserContext, console: str, token: str) -> Page:
    page = browser_context.new_page()
    page.goto(console + "/signin")
    page.fill("form#signin-form input[name=token]", token)
    page.locator("form#signin-form").get_by_role("button", name="Sign in").click()
    expect(page.locator("#whoami")).to_have_text("bob")
    return page


def test_the_capacity_page_draws_its_bars_and_redraws_them_live(
        browser_context: BrowserContext, site: tuple[str, str, str], tmp_path: Path) -> None:
    console, token, _ = site
    page = _signed_in(browser_context, console, token)
    errors = console_errors(page)
    page.locator("nav").get_by_role("link", name="Capacity").click()
    chart = page.locator("#chart-node-gpus svg[role=img]")
    expect(chart).to_have_attribute("aria-label", "GPUs per node")
    # gpu-1: serving 0, reserved 1, available 3; gpu-2: available 2; cpu-1 has no GPU, so no bar.
    expect(chart.locator("rect.bar")).to_have_count(3)
    expect(chart.locator("rect.bar.tone-warn title")).to_have_text("gpu-1 · reserved: 1 GPUs")
    expect(chart.locator("text.legend")).to_have_text(["serving", "reserved", "available", "free, not taking copies"])
    expect(page.locator("#chart-node-memory svg rect.bar")).to_have_count(3)
    expect(page.locator("#chart-model-gpus svg rect.bar")).to_have_count(2)
    shot(page, tmp_path, "capacity")
    # The live part swapped in by htmx (what its 10 s poll does): its charts are drawn anew.
    page.evaluate("document.querySelector('#chart-node-gpus svg').dataset.old = 'yes'")
    page.evaluate("htmx.ajax('GET', '/ui/capacity/live', {target: '#live', swap: 'outerHTML'})")
    expect(page.locator("#chart-node-gpus svg[data-old]")).to_have_count(0)
    expect(page.locator("#chart-node-gpus svg rect.bar")).to_have_count(3)
    assert errors == []


def test_the_endpoint_page_draws_its_last_hour(
        browser_context: BrowserContext, site: tuple[str, str, str], tmp_path: Path) -> None:
    console, token, endpoint_id = site
    page = _signed_in(browser_context, console, token)
    errors = console_errors(page)
    page.goto(f"{console}/endpoints/{endpoint_id}")
    traffic = page.locator("#chart-traffic svg[role=img]")
    expect(traffic.locator("path.line")).to_have_count(2)  # requests and failed: both lines, failed along zero
    expect(traffic.locator("circle.dot")).to_have_count(120)  # a point a minute, each with its tooltip
    expect(traffic.locator("text.tick").filter(has_text=":")).not_to_have_count(0)  # HH:MM under the axis
    latency = page.locator("#chart-latency svg[role=img]")
    expect(latency.locator("circle.dot")).to_have_count(2)  # p50 and p99 of the one busy minute
    expect(latency.locator("circle.dot.tone-warn title")).to_contain_text("p99: ")
    expect(page.locator("#chart-copies svg text.empty")).to_have_text("nothing recorded in this window")
    shot(page, tmp_path, "endpoint")
    assert errors == []


def test_the_usage_page_draws_bobs_requests_and_tokens(
        browser_context: BrowserContext, site: tuple[str, str, str], tmp_path: Path) -> None:
    page = _signed_in(browser_context, site[0], site[1])
    errors = console_errors(page)
    page.locator("nav").get_by_role("link", name="Usage").click()
    form = page.locator("form#usage-filter")
    form.locator("select[name=period]").select_option("hour")
    form.locator("input[name=since]").fill("1h")  # the busy minute, on a short axis (by default: this UTC month)
    form.get_by_role("button", name="Show").click()
    requests = page.locator("#chart-usage-requests svg[role=img]")
    expect(requests).to_have_attribute("aria-label", "Requests")
    expect(requests.locator("text.legend")).to_have_text(["bob"])  # bob's own usage, and nobody else's
    expect(requests.locator("circle.dot title").first).to_contain_text("bob: ")
    expect(page.locator("#chart-usage-tokens svg circle.dot")).not_to_have_count(0)
    expect(page.locator("#usage-total td").nth(3)).to_have_text("30")  # requests: the busy minute's 30
    expect(page.locator("#usage-csv")).to_have_attribute("href", "/ui/usage.csv?by=user&period=hour&since=1h")
    shot(page, tmp_path, "usage")
    assert errors == []
