"""`GET /v1/explain/routing/{endpoint}` and `GET /v1/explain/failure/{id}` through the real app and the typed client:
each published copy's verdict under a rollout's split, a copy's recorded ends and the log lines its reader may see,
and the refusals in one line (outside the scope: 404, as the endpoint and workflow routes; no token: 401)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import CopyScrape, ReserveRequest
from berth.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from berth.security import Identity
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from node.inventory import simulated_gpus
from server.app import build_context, create_app
from server.context import ServerContext
from server.submission import new_rows

pytestmark = pytest.mark.timeout(60)
ALICE = Identity(user="alice", groups=("team",), org="acme")
CAROL = Identity(user="carol", groups=("team",), org="acme")
BOB = Identity(user="bob", groups=("other",), org="elsewhere")
WF = "wf-oss"


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """Alice's GPT-OSS 20B (behind its LiteLLM proxy) with five copies on node-1: copy-0 ready (revision 1), copy-1
    draining, copy-2 ready on revision 2 which a blue-green split gives 0 %, copy-3 not ready yet, copy-4 ready but
    not (yet) in the list LiteLLM last reported."""
    context = build_context(tmp_path, "127.0.0.1:1")  # Temporal unreachable: the failure route says so
    for who in (ALICE, CAROL, BOB):
        context.store.ensure_user(who.user, org=who.org, groups=list(who.groups))
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "simulator",
                                            "gpus": simulated_gpus("8x80GB", "node-1")}, 30000)
    entry = load_catalog()["GPT-OSS 20B"]
    definition = render(entry, resolve_values(entry, {}))
    row, endpoint = new_rows(entry, definition, ALICE, WF)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    placements = context.store.placements
    for index, (ready, revision) in enumerate(((True, 1), (True, 1), (True, 2), (False, 1), (True, 1))):
        copy_id = f"{WF}.copy-{index}"
        assert placements.reserve(ReserveRequest(workflow_id=WF, copy_id=copy_id, nodes=1, gpus_per_node=1,
                                                 gpu_memory_gb=19.0)).placement is not None
        assert placements.publish(WF, endpoint.id, copy_id, f"http://127.0.0.1:{9000 + index}", ready, revision)
    context.store.drain_replica(f"{WF}.copy-1")
    context.store.outcomes.set_traffic(endpoint.id, {1: 100, 2: 0})
    context.store.load.add_litellm(endpoint.id, 4242, 1.0, 0, (f"{WF}.copy-0", f"{WF}.copy-1"))
    return context


def _client(context: ServerContext, who: Identity | None) -> ApiClient:
    token = context.signing.api_token(who) if who is not None else ""
    return ApiClient("http://api", token, transport=httpx.ASGITransport(app=create_app(context)))


def _endpoint_id(context: ServerContext) -> str:
    return context.store.workflow(WF).endpoint_id


async def test_each_copy_is_included_or_excluded_with_its_reason(context: ServerContext) -> None:
    async with _client(context, ALICE) as api:
        answer = await api.explain_routing(_endpoint_id(context))
    assert (answer.workflow_id, answer.router, answer.weights, answer.revision_shares) == (
        WF, "litellm", {1: 100, 2: 0}, {1: 100.0})
    assert [(c.copy_id, c.revision, c.verdict, c.share_percent) for c in answer.copies] == [
        (f"{WF}.copy-0", 1, "included", 100.0), (f"{WF}.copy-1", 1, "draining", None),
        (f"{WF}.copy-2", 2, "revision_weight_0", None), (f"{WF}.copy-3", 1, "not_ready", None),
        (f"{WF}.copy-4", 1, "not_in_litellm", None)]
    assert answer.note is not None and "is not known here" in answer.note


async def test_a_copys_ends_and_the_log_lines_its_reader_may_see(context: ServerContext) -> None:
    folder = context.state.workflow_logs(WF) / f"{WF}.copy-0"
    folder.mkdir(parents=True)
    (folder / "vllm-rank-0.log").write_text("".join(f"line {n}\n" for n in range(40)) + "Killed\n")
    (folder / "setup.log").write_text("a password\n")
    async with _client(context, ALICE) as api:
        mine = await api.explain_failure(f"{WF}.copy-0")
    assert mine.phase is None and mine.note is not None and "could not be read" in mine.note  # no Temporal here
    [copy] = mine.copies
    assert [log.job for log in copy.logs] == ["setup", "vllm-rank-0"]
    rank = copy.logs[1]
    assert (rank.rank, len(rank.lines), rank.lines[-1]) == (0, 15, "Killed")
    async with _client(context, CAROL) as api:  # in the workflow's scope and org: the engine's log only
        theirs = await api.explain_failure(WF)
    assert [c.copy_id for c in theirs.copies] == [f"{WF}.copy-0"]
    assert [log.job for log in theirs.copies[0].logs] == ["vllm-rank-0"]
    assert theirs.copies[0].log_note == "the owner's only (they can hold secrets): setup"


async def test_outside_the_scope_nothing_is_there_and_no_token_is_refused(context: ServerContext) -> None:
    endpoint_id = _endpoint_id(context)
    async with _client(context, BOB) as api:
        with pytest.raises(NotFoundError, match="No endpoint with ID"):
            await api.explain_routing(endpoint_id)
        for target in (WF, f"{WF}.copy-0", "no-such"):
            with pytest.raises(NotFoundError, match="No workflow with ID"):
                await api.explain_failure(target)
    async with _client(context, None) as api:
        with pytest.raises(AuthenticationError, match="No Berth API token"):
            await api.explain_routing(endpoint_id)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api") as raw:
        answer = await raw.get(f"/v1/explain/routing/{endpoint_id}",
                               headers={"Authorization": f"Bearer {context.signing.api_token(BOB)}"})
    assert answer.status_code == 404 and set(answer.json()) == {"detail", "code"} and "\n" not in answer.text


async def test_the_proxies_reported_scrapes_exclude_stale_and_failed_copies(context: ServerContext) -> None:
    """An endpoint proxy reports every copy's scrape ages (gateway/endpoint/scrape_report.py): explain routing
    judges the copies of an endpoint-proxy pool on them; a report older than 30 s says nothing."""
    entry = load_catalog()["GPT-OSS 20B"]
    definition = render(entry, resolve_values(entry, {"Proxy": "false"}))
    row, endpoint = new_rows(entry, definition, ALICE, "wf-direct")
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    copies = [f"wf-direct.copy-{index}" for index in range(4)]
    for index, copy_id in enumerate(copies):
        assert context.store.placements.reserve(ReserveRequest(workflow_id="wf-direct", copy_id=copy_id, nodes=1,
                                                               gpus_per_node=0)).placement is not None
        assert context.store.placements.publish("wf-direct", endpoint.id, copy_id, f"http://127.0.0.1:{9100 + index}",
                                                True)
    admin = Identity(user="root", groups=(), org="default", admin=True)
    reported_at = time.monotonic()
    async with _client(context, admin) as api:
        await api.report_scrapes({copies[0]: CopyScrape(scraped_ago_s=2.0),
                                  copies[1]: CopyScrape(scraped_ago_s=45.0),
                                  copies[2]: CopyScrape(scraped_ago_s=5.0, failed_ago_s=1.0)})
    context.store.scrapes.report({copies[3]: CopyScrape(failed_ago_s=0.5)}, now=time.time() - 60)  # too old
    async with _client(context, ALICE) as api:
        answer = await api.explain_routing(endpoint.id)
    verdicts = {c.copy_id: (c.verdict, c.metrics_fresh) for c in answer.copies}
    assert verdicts == {copies[0]: ("included", True), copies[1]: ("metrics_stale", False),
                        copies[2]: ("scrape_failed", False), copies[3]: ("included", None)}
    stale = next(c for c in answer.copies if c.copy_id == copies[1])
    # The age grows with the time the test took between the report and the question (seconds on a loaded CI box).
    age = re.fullmatch(r"last scraped (\d+) s ago \(more than 30 s\)", stale.detail)
    assert age is not None, stale.detail
    assert 45 <= int(age.group(1)) <= 46 + time.monotonic() - reported_at
    assert answer.note is None or "is not known here" not in answer.note
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError):
            await api.report_scrapes({copies[0]: CopyScrape(scraped_ago_s=0.0)})  # only Berth's services report
