"""Issue 36's constructed cluster, every part at once, through the real app in process: nodes in two sites and
three failure domains (plus one in a third site and one with no site), one hot GPU, one with ECC errors, an H100
sliced into MIG instances. A pool with Residency=eu spreads its copies over the three domains, skips the hot and
the ECC GPUs, lands one copy on a slice (its rank's CUDA_VISIBLE_DEVICES the slice's MIG UUID) while the parent
takes none, never reaches the node outside its residency or the one with no site; explain placement names each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from activities.vllm_command import rank_environment
from berth.api_client import ApiClient
from berth.api_mig import MigApi
from berth.contracts import ReserveRequest
from berth.contracts.mig import MigSliceRequest
from berth.security import Identity
from catalog.definition import EngineSpec
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from server.app import build_context, create_app
from server.store.mig_view import FIRST_SLICE_ID
from server.submission import new_rows
from workflows.payloads import RankSpec

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
GPU = {"name": "NVIDIA A100-SXM4-80GB", "memory_gb": 80, "temperature_c": 60, "ecc_uncorrected": 0}
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_gb": 85.5, "temperature_c": 55, "ecc_uncorrected": 0}
SLICE = "MIG-6f0e2a1c-0000-4000-8000-000000000001"
# node: (site, failure domain, its GPUs)
CLUSTER: dict[str, tuple[str | None, str | None, list[dict[str, Any]]]] = {
    "hot": ("eu-west", "rack-a", [GPU, {**GPU, "temperature_c": 95}]),  # GPU 1 too hot (max_gpu_temp_c 90)
    "ecc": ("eu-west", "rack-b", [{**GPU, "ecc_uncorrected": 2}, GPU]),  # GPU 0 with uncorrected ECC errors
    "mig": ("eu-north", "rack-c", [H100]),  # sliced below: its GPU 0 only as slices
    "usa": ("us-east", "rack-d", [GPU, GPU]),  # outside Residency=eu
    "bare": (None, None, [GPU, GPU]),  # no site: excluded once a pool sets Residency
}


async def test_the_constructed_fleet_places_by_sites_domains_health_and_slices(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # these routes never reach Temporal
    token = context.signing.api_token(ADMIN)
    app = create_app(context)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        for index, (node, (site, domain, gpus)) in enumerate(CLUSTER.items()):
            labels = {"berth.site": site, "berth.failure-domain": domain} if site and domain else {}
            beat = {"address": f"10.0.0.{index + 1}", "engine": "vllm", "port_start": 30000, "labels": labels,
                    "gpus": [{"index": i, **gpu} for i, gpu in enumerate(gpus)]}
            assert (await api.post(f"/v1/nodes/{node}/heartbeat", json=beat)).status_code == 200
        async with MigApi("http://api", token, transport=httpx.ASGITransport(app=app)) as mig:
            made = await mig.create_mig_slice("mig", MigSliceRequest(gpu=0, profile="3g.40gb", uuid=SLICE))
        assert made.id == FIRST_SLICE_ID

        entry = load_catalog()["SmolLM2 135M Instruct"]
        definition = render(entry, resolve_values(entry, {"Residency": "eu", "GpusPerNode": "1", "Proxy": "false"}))
        row, endpoint = new_rows(entry, definition, ADMIN, "wf-fleet")
        context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
        assert definition.replica is not None and definition.replica.sites is not None
        sites = definition.replica.sites.placement()
        placed: dict[str, Any] = {}
        for index in range(4):
            request = ReserveRequest(workflow_id="wf-fleet", copy_id=f"wf-fleet.copy-{index}", nodes=1,
                                     gpus_per_node=1, sites=sites)
            answer = await api.post("/v1/internal/reservations", json=request.model_dump(mode="json"))
            assert answer.status_code == 200, answer.text
            placement = answer.json()["placement"]
            placed[request.copy_id] = placement["ranks"][0] if placement else None

    # One copy in each failure domain of the residency, on the healthy GPU there and on the slice, not its parent;
    # the fourth waits: the hot and the ECC GPUs, the node outside the residency and the one with no site stay free.
    where = {copy: (rank["node_id"], tuple(rank["gpus"])) if rank else None for copy, rank in placed.items()}
    assert sorted(filter(None, where.values())) == [("ecc", (1,)), ("hot", (0,)), ("mig", (FIRST_SLICE_ID,))]
    assert where["wf-fleet.copy-3"] is None
    on_slice = next(rank for rank in placed.values() if rank and rank["node_id"] == "mig")
    assert on_slice["devices"] == [SLICE]
    rank = RankSpec(workflow_id="wf-fleet", copy_id="c", rank=0, nnodes=1, gpus_per_node=1,
                    engine=EngineSpec(served_model_name="m", max_model_len=1024), gpus=tuple(on_slice["gpus"]),
                    devices=tuple(on_slice["devices"]), host="127.0.0.1", port=on_slice["port"],
                    master_addr="127.0.0.1", master_port=0, model_dir="/m", log_name="vllm-rank-0")
    assert rank_environment(rank, "key")["CUDA_VISIBLE_DEVICES"] == SLICE

    async with ApiClient("http://api", token, transport=httpx.ASGITransport(app=app)) as client:
        explained = await client.explain_placement("wf-fleet")
        nodes = {node.id: node for node in await client.nodes()}
    waiting = explained.copies[-1]
    assert waiting.copy_id is None and not waiting.fits_now
    verdicts = {verdict.node: (verdict.outcome, verdict.detail) for verdict in waiting.nodes}
    assert verdicts["usa"] == ("outside_sites", "site us-east: outside Residency=eu")
    assert verdicts["bare"][0] == "outside_sites"
    # Their healthy GPU is held: busy, and the detail names the GPU placement skips there.
    assert verdicts["hot"][0] == "busy" and "skipped GPU 1: 95 °C" in verdicts["hot"][1]
    assert verdicts["ecc"][0] == "busy" and "skipped GPU 0: 2 uncorrected ECC" in verdicts["ecc"][1]
    assert verdicts["mig"][0] == "busy"
    # node list shows where each node is, the skipped GPUs, and the sliced GPU as its slice.
    assert (nodes["hot"].site, nodes["hot"].failure_domain) == ("eu-west", "rack-a")
    assert [gpu.unhealthy is not None for gpu in nodes["hot"].gpus] == [False, True]
    assert [gpu.index for gpu in nodes["mig"].gpus] == [FIRST_SLICE_ID]
