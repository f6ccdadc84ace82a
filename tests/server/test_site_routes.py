"""Sites through the real app, in process (issue 36): nodes heartbeat their site and failure domain; a workflow with
site values places its copies within them (the reservation route reading the pool's other copies); the routes
table and LiteLLM's copy list carry each copy's site and its site_local rank; `berth node list`'s route shows the
sites; explain placement names the nodes the residency turned away."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import ReserveRequest
from berth.errors import CapacityError
from berth.security import Identity
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from server.app import build_context, create_app
from server.capacity import check_capacity
from server.submission import new_rows

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
NODES = {"w1": ("eu-west", "rack-a"), "w2": ("eu-west", "rack-b"), "n1": ("eu-north", "rack-c"),
         "e1": ("us-east", "rack-d")}
VALUES = {"PreferredSite": "eu-west", "FailoverSites": "eu-north", "Residency": "eu", "RoutingPolicy": "site_local",
          "Proxy": "false", "MinReplicas": "3", "MaxReplicas": "3", "GpusPerNode": "1"}


async def test_sites_from_heartbeat_to_placement_routes_and_explain(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # these routes never reach Temporal
    context.store.ensure_user(ADMIN.user, org=ADMIN.org, groups=list(ADMIN.groups))
    token = context.signing.api_token(ADMIN)
    transport = httpx.ASGITransport(app=create_app(context))
    async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        for index, (node, (site, domain)) in enumerate(NODES.items()):
            beat = {"address": f"10.0.0.{index + 1}", "engine": "simulator", "port_start": 30000,
                    "labels": {"berth.site": site, "berth.failure-domain": domain},
                    "gpus": [{"index": 0, "name": "Simulated GPU 80GB", "memory_gb": 80}]}
            assert (await api.post(f"/v1/nodes/{node}/heartbeat", json=beat)).status_code == 200
        refused = await api.post("/v1/nodes/bad/heartbeat", json={**beat, "labels": {"berth.site": "eu west"}})
        assert refused.status_code == 422 and "is not a site word" in refused.text

        entry = load_catalog()["SmolLM2 135M Instruct"]
        definition = render(entry, resolve_values(entry, VALUES))
        row, endpoint = new_rows(entry, definition, ADMIN, "wf-sites")
        context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
        assert definition.replica is not None and definition.replica.sites is not None
        sites = definition.replica.sites.placement()
        placed = {}
        for index in range(4):
            request = ReserveRequest(workflow_id="wf-sites", copy_id=f"wf-sites.copy-{index}", nodes=1,
                                     gpus_per_node=1, sites=sites)
            answer = (await api.post("/v1/internal/reservations", json=request.model_dump(mode="json")))
            assert answer.status_code == 200, answer.text
            result = answer.json()
            placed[request.copy_id] = result["placement"]["ranks"][0]["node_id"] if result["placement"] else None
        # Preferred eu-west first (its two domains), then eu-north; us-east never; the fourth waits.
        assert placed == {"wf-sites.copy-0": "w1", "wf-sites.copy-1": "w2", "wf-sites.copy-2": "n1",
                          "wf-sites.copy-3": None}
        for index in range(3):
            copy = {"workflow_id": "wf-sites", "endpoint_id": endpoint.id, "copy_id": f"wf-sites.copy-{index}",
                    "url": f"http://10.0.0.{index + 1}:30000"}
            assert (await api.put(f"/v1/internal/replicas/{copy['copy_id']}", json=copy)).status_code == 204

        table = next(e for e in (await api.get("/v1/internal/routes")).json()["endpoints"] if e["id"] == endpoint.id)
        assert table["routing_policy"] == "site_local"
        assert [(c["copy_id"], c["site"], c["site_rank"]) for c in table["pool"]] == [
            ("wf-sites.copy-0", "eu-west", 0), ("wf-sites.copy-1", "eu-west", 0), ("wf-sites.copy-2", "eu-north", 1)]
        listed = (await api.get(f"/v1/internal/endpoints/{endpoint.id}/replicas")).json()["copies"]
        assert [c["site_rank"] for c in listed] == [0, 0, 1]

        nodes = {n["id"]: (n.get("site"), n.get("failure_domain")) for n in (await api.get("/v1/nodes")).json()}
        assert nodes == NODES

        # A copy that reached us-east anyway (reserved without the rules, as a node moving sites would leave one):
        # site_local never routes to it, and explain routing says why.
        stray = ReserveRequest(workflow_id="wf-sites", copy_id="wf-sites.copy-9", nodes=1, gpus_per_node=1)
        answer = (await api.post("/v1/internal/reservations", json=stray.model_dump(mode="json"))).json()
        assert answer["placement"]["ranks"][0]["node_id"] == "e1"
        copy = {"workflow_id": "wf-sites", "endpoint_id": endpoint.id, "copy_id": stray.copy_id,
                "url": "http://10.0.0.4:30000"}
        assert (await api.put(f"/v1/internal/replicas/{stray.copy_id}", json=copy)).status_code == 204

    async with ApiClient("http://api", token, transport=httpx.ASGITransport(app=create_app(context))) as client:
        explained = await client.explain_placement("wf-sites")
        routing = await client.explain_routing(endpoint.id)
    verdict = {c.copy_id: (c.verdict, c.detail) for c in routing.copies}
    assert verdict["wf-sites.copy-9"] == ("outside_sites", "at site us-east: site_local sends nothing outside the "
                                          "endpoint's PreferredSite and FailoverSites, within its AllowedSites and "
                                          "Residency")
    assert verdict["wf-sites.copy-2"][0] == "included" and verdict["wf-sites.copy-2"][1].endswith(
        "; at failover site eu-north: only while the preferred site is saturated")
    assert verdict["wf-sites.copy-0"][0] == "included"
    following = explained.copies[-1]
    assert following.copy_id is None and not following.fits_now
    verdicts = {n.node: (n.outcome, n.detail) for n in following.nodes}
    assert verdicts["e1"] == ("outside_sites", "site us-east: outside Residency=eu")
    assert verdicts["w1"][0] == "busy"


def test_submission_refuses_values_no_node_is_within(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")
    for index, (node, site) in enumerate((("w1", "eu-west"), ("e1", "us-east"), ("n0", None))):
        labels = {"berth.site": site} if site else {}
        context.store.heartbeat_node(node, {"address": "127.0.0.1", "engine": "simulator", "labels": labels,
                                            "gpus": [{"index": 0, "memory_gb": 80}]}, 30000 + index * 100)
    entry = load_catalog()["SmolLM2 135M Instruct"]
    with pytest.raises(CapacityError) as refused:
        check_capacity(context, entry, render(entry, resolve_values(entry, {"Residency": "ap", "GpusPerNode": "1"})))
    assert str(refused.value) == ("Rejected: no node is at a site within Residency=ap; the nodes' sites: eu-west, "
                                  "us-east (a node agent's --site).")
    with pytest.raises(CapacityError, match="each with 1 GPU.* at an allowed site, but the cluster has only 1 such "):
        check_capacity(context, entry, render(entry, resolve_values(entry, {
            "AllowedSites": "eu-west", "Nodes": "2", "GpusPerNode": "1"})))
    check_capacity(context, entry, render(entry, resolve_values(entry, {"Residency": "eu", "GpusPerNode": "1"})))
