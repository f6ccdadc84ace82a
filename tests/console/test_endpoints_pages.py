"""The endpoint pages over the real app (in-process, no Temporal: the workflow and its endpoint are written
to the store the way a start writes them): the list in the user's scope, the facts, a generated token shown
once in the POST's own answer, and the snippets carrying it; the chart of its last hour from the audit the
endpoint proxies recorded."""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from berth.contracts import AuditBatch, AuditPhase, AuditRecord
from console.snippets import api_base
from server.context import ServerContext
from server.store.tables import EndpointRow
from tests.console.app_support import browser, console_context, csrf_of, sign_in, start, user_token


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = console_context(tmp_path / "state")
    # A CPU node, so the submission's capacity check passes.
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "vllm-cpu", "cpus": 8,
                                            "memory_gb": 32, "gpus": []}, port_start=30000)
    return context


def test_the_api_base_gets_v1_once() -> None:
    assert api_base("http://h/endpoints/ep-1") == "http://h/endpoints/ep-1/v1"
    assert api_base("http://h/endpoints/ep-1/v1/") == "http://h/endpoints/ep-1/v1"


async def test_an_empty_list_says_what_to_do(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/endpoints")).text
        assert 'class="empty"' in page and "Catalog" in page


async def test_bob_does_not_see_the_admin_user_scoped_endpoint(context: ServerContext) -> None:
    mine = start(context, context.store.identity("admin"), {"Scope": "user", "Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        listed = (await client.get("/ui/endpoints")).text
        assert f'tr data-id="{mine}"' in listed and "/ui/workflows/" in listed
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        assert mine not in (await client.get("/ui/endpoints")).text
        refused = await client.get(f"/ui/endpoints/{mine}")
        assert refused.status_code in (403, 404) and 'role="alert"' in refused.text


async def test_the_endpoint_page_shows_facts_and_snippets_with_the_env_token(context: ServerContext) -> None:
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get(f"/ui/endpoints/{endpoint_id}")).text
        url = re.search(r'id="endpoint-url">([^<]+)<', page)
        assert url and url.group(1).endswith(f"/endpoints/{endpoint_id}")
        assert 'id="endpoint-scope"' in page and 'id="endpoint-ready"' in page
        assert 'id="token-form"' in page and '<option selected>8h</option>' in page
        for name in ("curl", "python", "opencode"):
            assert f'<pre id="snippet-{name}">' in page and f'data-copy="#snippet-{name}"' in page
        assert f"{url.group(1)}/v1/chat/completions" in page and "Bearer $BERTH_TOKEN" in page
        assert 'os.environ[&#34;BERTH_TOKEN&#34;]' in page and "{env:BERTH_TOKEN}" in page
        assert 'id="token-value"' not in page


async def test_a_generated_token_is_shown_once_in_the_answer_and_in_the_snippets(context: ServerContext) -> None:
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        csrf = csrf_of((await client.get(f"/ui/endpoints/{endpoint_id}")).text)
        answer = await client.post(f"/ui/endpoints/{endpoint_id}/token", data={"csrf": csrf, "expiration": "1h"})
        assert answer.status_code == 200 and "location" not in answer.headers
        assert answer.headers["cache-control"] == "no-store"
        token = re.search(r'<input id="token-value" value="([^"]+)" readonly>', answer.text)
        assert token and 'button type="button" class="copy" data-copy="#token-value"' in answer.text
        assert f"Bearer {token.group(1)}" in answer.text and "$BERTH_TOKEN" not in answer.text.split("Call it")[1]
        assert '<option selected>1h</option>' in answer.text
        # Shown once: the page read again holds no token.
        assert token.group(1) not in (await client.get(f"/ui/endpoints/{endpoint_id}")).text
        odd = await client.post(f"/ui/endpoints/{endpoint_id}/token", data={"csrf": csrf, "expiration": "99y"})
        assert odd.status_code == 400 and 'id="token-error" class="error" role="alert"' in odd.text
        forged = await client.post(f"/ui/endpoints/{endpoint_id}/token", data={"csrf": "x", "expiration": "1h"})
        assert forged.status_code == 403 and 'id="token-value"' not in forged.text


async def test_an_https_endpoint_says_how_to_trust_a_private_ca(context: ServerContext) -> None:
    context.settings = context.settings.model_copy(update={"proxy_url": "https://berth.example:8443"})
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get(f"/ui/endpoints/{endpoint_id}")).text
        assert "https://berth.example:8443/endpoints/" in page
        assert "--cacert" in page and "CURL_CA_BUNDLE" in page and "NODE_EXTRA_CA_CERTS" in page


async def test_an_endpoint_without_client_facts_still_shows_curl_and_python(context: ServerContext) -> None:
    with context.store.session() as s:  # an endpoint row with no workflow definition behind it
        s.add(EndpointRow(id="ep-bare", workflow_id="wf-gone", service="vllm", scope="group", owner="admin",
                          org="default", groups=["default"], created_at=time.time(), annotations={}))
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/endpoints/ep-bare")).text
        assert 'id="snippet-curl"' in page and "MODEL_ID" in page and "Client facts:" in page
        assert 'id="snippet-opencode"' not in page and "no opencode.json can be written" in page


def _chart(page: str, chart_id: str) -> dict[str, Any]:
    found = re.search(rf"""<figure class="chart" id="{chart_id}" data-chart='([^']*)'>""", page)
    assert found, f"no chart {chart_id}"
    return json.loads(html.unescape(found.group(1)))


async def test_the_endpoint_page_charts_its_last_hour(context: ServerContext) -> None:
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    minute = int(time.time() // 60) - 2  # whole, and inside the hour whichever minute the page is read in
    records = []
    for index, (phase, latency_ms) in enumerate(((AuditPhase.SUCCESS, 120.0), (AuditPhase.FAILED, 5.0))):
        records += [AuditRecord(at=minute * 60.0 + 1, phase=AuditPhase.ATTEMPT, request_id=f"r{index}",
                                endpoint_id=endpoint_id, user="bob"),
                    AuditRecord(at=minute * 60.0 + 2, phase=phase, request_id=f"r{index}", latency_ms=latency_ms,
                                status=200 if phase is AuditPhase.SUCCESS else 500, endpoint_id=endpoint_id,
                                user="bob")]
    context.store.audit.append_batch(AuditBatch.of("proxy-1", 1, records))
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get(f"/ui/endpoints/{endpoint_id}")).text
        live = (await client.get(f"/ui/endpoints/{endpoint_id}/history", headers={"HX-Request": "true"})).text
    assert '<script src="/ui/static/charts.js" defer></script>' in page and "style=" not in page
    traffic, latency, copies = (_chart(page, f"chart-{name}") for name in ("traffic", "latency", "copies"))
    assert len(traffic["x"]) == 60 and traffic["x"] == sorted(traffic["x"])
    at = traffic["x"].index(minute * 60.0)
    requests, failed = ({s["name"]: s["values"] for s in traffic["series"]}[name] for name in ("requests", "failed"))
    assert (requests[at], failed[at]) == (round(2 / 60, 4), round(1 / 60, 4))
    assert sum(requests) == requests[at]  # every other minute is quiet
    p50 = {s["name"]: s["values"] for s in latency["series"]}["p50"]
    assert p50[at] == pytest.approx(120.0, rel=0.09) and p50.count(None) == 59
    assert copies["series"][0]["values"] == [None] * 60  # no autoscaler ran: nothing sampled
    assert 'id="history-table"' in page
    assert live.startswith('<section id="history"') and 'hx-trigger="every 60s"' in live and "<html" not in live


async def test_outside_the_endpoints_scope_its_history_is_refused(context: ServerContext) -> None:
    theirs = start(context, context.store.identity("admin"), {"Scope": "user", "Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        refused = await client.get(f"/ui/endpoints/{theirs}/history")
    assert refused.status_code == 404 and 'role="alert"' in refused.text and "chart-traffic" not in refused.text
