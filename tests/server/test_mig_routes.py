"""MIG slices through the real app and the typed client (issue 36): an administrator slices a node's H100 80GB into
profiles, refused in one line for a profile it does not know, a budget the GPU's slices would overrun, a GPU that is
not an H100 80GB, and a parent a copy holds; a copy lands on a slice (its rank's CUDA_VISIBLE_DEVICES names the slice's
MIG UUID) while the parent takes none; a slice a copy holds is not deleted; a pending slice takes no copy until the
instance made for it is named. Another API process's view sees each change before its next reservation."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from activities.vllm_command import rank_environment
from berth.api_client import ApiClient
from berth.api_events import EventsApi
from berth.api_mig import MigApi
from berth.contracts import ReserveRequest, ReserveResult
from berth.contracts.mig import MigSliceRequest
from berth.contracts.placement import RankPlacement
from berth.errors import ConflictError, NotFoundError, PermissionDeniedError, UserInputError
from berth.security import Identity
from catalog.definition import EngineSpec
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.database import Store
from server.store.mig_view import FIRST_SLICE_ID
from workflows.payloads import RankSpec

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_gb": 85.5}
UUIDS = [f"MIG-{n:08x}-0000-4000-8000-000000000000" for n in range(8)]


def _heartbeat(store: Store, node_id: str, gpus: list[dict[str, object]], port_start: int = 30000) -> None:
    store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "vllm",
                                   "gpus": [{"index": i, **gpu} for i, gpu in enumerate(gpus)]}, port_start)


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """node-h: one H100 80GB; node-a: one 80 GB GPU that is not an H100."""
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    context.store.ensure_user(ALICE.user, org=ALICE.org, groups=list(ALICE.groups))
    _heartbeat(context.store, "node-h", [H100])
    _heartbeat(context.store, "node-a", [{"name": "NVIDIA A100-SXM4-80GB", "memory_gb": 85.1}], 30100)
    return context


def _api(context: ServerContext, who: Identity = ADMIN) -> MigApi:
    return MigApi("http://api", context.signing.api_token(who), transport=httpx.ASGITransport(app=create_app(context)))


def _reserve(store: Store, copy_id: str, gpu_memory_gb: float = 0) -> tuple[RankPlacement, ...] | str:
    result = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=copy_id, nodes=1, gpus_per_node=1,
                                                     gpu_memory_gb=gpu_memory_gb))
    if result.placement is None:
        assert result.blocked_reason is not None
        return result.blocked_reason
    return result.placement.ranks


def _one_line(error: pytest.ExceptionInfo[Exception], words: str) -> None:
    line = str(error.value)
    assert words in line and "\n" not in line, line


async def test_slices_are_made_listed_and_refused_in_one_line(context: ServerContext) -> None:
    _heartbeat(context.store, "node-s", [{**H100, "simulated": True}], 30200)
    async with _api(context) as api:
        made = await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="3g", uuid=UUIDS[0]))
        assert (made.id, made.gpu, made.profile, made.memory_gb, made.uuid, made.created_by) == (
            FIRST_SLICE_ID, 0, "3g.40gb", 40, UUIDS[0], "admin")
        second = await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="3g.40gb"))
        assert second.id == FIRST_SLICE_ID + 1 and second.uuid is None  # a real GPU's: pending until named
        assert [(s.id, s.profile, s.uuid) for s in await api.mig_slices("node-h")] == [
            (FIRST_SLICE_ID, "3g.40gb", UUIDS[0]), (FIRST_SLICE_ID + 1, "3g.40gb", None)]
        with pytest.raises(UserInputError) as refused:  # 3g + 3g took the 8 memory slices; compute has one left
            await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="1g"))
        _one_line(refused, "GPU 0 on node node-h cannot take it: 1g.10gb needs 10 GB, and only 0 GB of the GPU's "
                           "80 GB is free.")
        with pytest.raises(UserInputError) as refused:
            await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="4g"))
        _one_line(refused, "Unknown MIG profile '4g'; an H100 80GB takes 1g.10gb (1g), 2g.20gb (2g), 3g.40gb (3g), "
                           "7g.80gb (7g).")
        with pytest.raises(UserInputError) as refused:
            await api.create_mig_slice("node-a", MigSliceRequest(gpu=0, profile="1g"))
        _one_line(refused, "GPU 0 on node node-a is a NVIDIA A100-SXM4-80GB with 85.1 GB; MIG slices are made only "
                           "of an H100 80GB.")
        with pytest.raises(ConflictError) as refused:  # one name, one device: never two slices of one UUID
            await api.create_mig_slice("node-s", MigSliceRequest(gpu=0, profile="1g", uuid=UUIDS[0]))
        _one_line(refused, f"{UUIDS[0]} already names MIG slice {FIRST_SLICE_ID} on node node-h.")
        with pytest.raises(NotFoundError, match="Node node-h has no GPU 3"):
            await api.create_mig_slice("node-h", MigSliceRequest(gpu=3, profile="1g"))
        with pytest.raises(NotFoundError, match="No node 'nowhere'"):
            await api.mig_slices("nowhere")
        for body, words in (({"gpu": 0, "profile": "1g", "uuid": "MIG-x,0"}, "uuid"),
                            ({"gpu": -1, "profile": "1g"}, "gpu"), ({"gpu": 0, "profile": "1g" * 9}, "profile")):
            with pytest.raises(UserInputError) as refused:
                await api.request("POST", "/v1/nodes/node-h/mig", json=body)
            _one_line(refused, words)
        with pytest.raises(NotFoundError, match="No MIG slice 600 on node node-h"):
            await api.delete_mig_slice("node-h", 600)
    async with _api(context, ALICE) as api:  # administrators only, reading included
        with pytest.raises(PermissionDeniedError):
            await api.mig_slices("node-h")
        with pytest.raises(PermissionDeniedError):
            await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="1g"))


async def test_a_copy_lands_on_a_slice_the_parent_takes_none_and_a_held_slice_stays(context: ServerContext,
                                                                                     tmp_path: Path) -> None:
    store = context.store
    other = Store(str(store.engine.url), context.cipher)  # another API process over the same database
    assert _reserve(other, "wf.whole") == (RankPlacement(rank=0, node_id="node-a", address="127.0.0.1", gpus=(0,),
                                                         port=30100),)  # pack: the first fitting node
    other.placements.release("wf.whole")
    async with _api(context) as api:
        for uuid in UUIDS[:2]:
            await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="3g", uuid=uuid))
        blocker = _reserve(other, "wf.a-blocker")  # pack: node-a, the node with the fewest free GPUs
        assert isinstance(blocker, tuple) and blocker[0].node_id == "node-a"
        first = _reserve(other, "wf.on-slice", gpu_memory_gb=30)
        assert isinstance(first, tuple) and (first[0].node_id, first[0].gpus, first[0].devices) == (
            "node-h", (FIRST_SLICE_ID,), (UUIDS[0],))
        second = _reserve(store, "wf.on-slice-2")
        assert isinstance(second, tuple) and second[0].devices == (UUIDS[1],)
        # Both slices held, node-a's GPU held: the parent GPU 0 is not a GPU placement may hand out.
        assert "waiting for 1 node(s) with 1 free GPU(s)" in str(_reserve(other, "wf.parent"))
        # The rank's environment names the slice by its MIG UUID, as NVIDIA's MIG user guide says.
        rank = RankSpec(workflow_id="wf", copy_id="wf.on-slice", rank=0, nnodes=1, gpus_per_node=1,
                        engine=EngineSpec(served_model_name="m", max_model_len=1024), gpus=first[0].gpus,
                        devices=first[0].devices, host="127.0.0.1", port=first[0].port, master_addr="127.0.0.1",
                        master_port=0, model_dir="/m", log_name="vllm-rank-0")
        assert rank_environment(rank, "key")["CUDA_VISIBLE_DEVICES"] == UUIDS[0]
        with pytest.raises(ConflictError) as refused:
            await api.delete_mig_slice("node-h", FIRST_SLICE_ID)
        _one_line(refused, f"MIG slice {FIRST_SLICE_ID} on node node-h is held by copy wf.on-slice; stop or move "
                           f"that copy first.")
        assert [s.held_by for s in await api.mig_slices("node-h")] == ["wf.on-slice", "wf.on-slice-2"]
        async with ApiClient("http://api", context.signing.api_token(ALICE),
                             transport=httpx.ASGITransport(app=create_app(context))) as nodes_api:
            [node_h] = [node for node in await nodes_api.nodes() if node.id == "node-h"]
        # `node list` shows the node as placement sees it: the slices in place of their parent, each one's holder as
        # the caller may see it (another's copy, unnamed).
        assert [(g.index, g.name, g.memory_gb, g.uuid, g.allocated_to is not None) for g in node_h.gpus] == [
            (FIRST_SLICE_ID, "MIG 3g.40gb of GPU 0", 40, UUIDS[0], True),
            (FIRST_SLICE_ID + 1, "MIG 3g.40gb of GPU 0", 40, UUIDS[1], True)]
        assert node_h.allocated == 2
        store.placements.release("wf.on-slice")
        assert (await api.delete_mig_slice("node-h", FIRST_SLICE_ID)).id == FIRST_SLICE_ID
        assert "waiting" in str(_reserve(other, "wf.parent"))  # one slice left: the parent still takes nothing
        store.placements.release("wf.on-slice-2")
        await api.delete_mig_slice("node-h", FIRST_SLICE_ID + 1)
        async with EventsApi("http://api", context.signing.api_token(ALICE),
                             transport=httpx.ASGITransport(app=create_app(context))) as reader:  # node events: public
            page = await reader.events(node="node-h", kind="node.sliced,node.unsliced")
        told = [(event.kind, event.message) for event in page.events]
        assert told[-2:] == [("node.unsliced", f"admin removed MIG slice {FIRST_SLICE_ID} from node node-h"),
                             ("node.unsliced", f"admin removed MIG slice {FIRST_SLICE_ID + 1} from node node-h")]
        assert told[0] == ("node.sliced", f"admin made MIG slice {FIRST_SLICE_ID} (3g.40gb) of GPU 0 on node node-h")
        whole = _reserve(other, "wf.parent")  # no slice left: the GPU is whole again, named by its index
        assert isinstance(whole, tuple) and (whole[0].node_id, whole[0].gpus, whole[0].devices) == ("node-h", (0,), ())
        with pytest.raises(ConflictError) as refused:  # and a GPU a copy holds is not sliced
            await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="1g"))
        _one_line(refused, "GPU 0 on node node-h is held by copy wf.parent; a GPU is sliced only while no copy "
                           "holds it.")


async def test_a_pending_slice_takes_a_copy_once_its_instance_is_named(context: ServerContext) -> None:
    async with _api(context) as api:
        pending = await api.create_mig_slice("node-h", MigSliceRequest(gpu=0, profile="7g"))
        async with ApiClient("http://api", context.signing.api_token(ADMIN),
                             transport=httpx.ASGITransport(app=create_app(context))) as nodes_api:
            [node_h] = [node for node in await nodes_api.nodes() if node.id == "node-h"]
        assert [(g.index, g.name, g.uuid) for g in node_h.gpus] == [(pending.id, "MIG 7g.80gb of GPU 0, pending", None)]
        taken = _reserve(context.store, "wf.a")
        assert isinstance(taken, tuple) and taken[0].node_id == "node-a"
        assert "waiting" in str(_reserve(context.store, "wf.b"))  # the parent is sliced, its slice not yet named
        named = await api.name_mig_slice("node-h", pending.id, UUIDS[7])
        assert named.uuid == UUIDS[7]
        placed = _reserve(context.store, "wf.b", gpu_memory_gb=70)
        assert isinstance(placed, tuple) and placed[0].devices == (UUIDS[7],)
        context.store.placements.release("wf.b")
        _heartbeat(context.store, "node-h", [])  # its GPU gone from the agent's report: its slice goes with it
        assert "waiting" in str(_reserve(context.store, "wf.c"))
        _heartbeat(context.store, "node-h", [H100])
        assert _reserve(context.store, "wf.b") == placed
        assert (await api.name_mig_slice("node-h", pending.id, UUIDS[7])).held_by == "wf.b"  # the same name: a no-op
        with pytest.raises(ConflictError) as refused:
            await api.name_mig_slice("node-h", pending.id, UUIDS[6])
        _one_line(refused, f"is named {UUIDS[7]} and held by copy wf.b; it is renamed only while no copy holds it.")


async def test_a_simulated_h100_s_slice_gets_a_uuid_of_the_mig_form(context: ServerContext) -> None:
    _heartbeat(context.store, "node-s", [{**H100, "simulated": True}], 30200)
    async with _api(context) as api:
        made = await api.create_mig_slice("node-s", MigSliceRequest(gpu=0, profile="1g.10gb"))
    assert made.uuid is not None and made.uuid.startswith("MIG-") and len(made.uuid) == 40


async def test_a_copy_of_several_gpus_takes_whole_gpus_never_a_slice(context: ServerContext) -> None:
    """CUDA sees one MIG device a process: a 2-GPU rank given a whole GPU and a slice could not use them. Pack would
    choose node-m (3 free: a whole GPU and two slices) before node-w (4 whole); the copy goes to node-w."""
    _heartbeat(context.store, "node-m", [H100, H100], 30200)
    _heartbeat(context.store, "node-w", [H100] * 4, 30300)
    for busy in ("node-a", "node-h"):
        context.store.set_draining(busy, True)
    async with _api(context) as api:
        for uuid in UUIDS[:2]:
            await api.create_mig_slice("node-m", MigSliceRequest(gpu=1, profile="3g", uuid=uuid))

    def two_gpus(copy_id: str) -> ReserveResult:
        return context.store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=copy_id, nodes=1,
                                                               gpus_per_node=2))

    result = two_gpus("wf.tp2")
    assert result.placement is not None
    assert [(r.node_id, r.gpus, r.devices) for r in result.placement.ranks] == [("node-w", (0, 1), ())]
    second = two_gpus("wf.tp2-b")
    assert second.placement is not None and second.placement.ranks[0].gpus == (2, 3)
    # node-m still has three free "GPUs", two of them slices: a third 2-GPU copy waits rather than take them.
    assert "waiting for 1 node(s) with 2 free GPU(s)" in str(two_gpus("wf.tp2-c").blocked_reason)
    for copy_id, gpus in (("wf.one", (0,)), ("wf.two", (FIRST_SLICE_ID,))):  # one-GPU copies take what is left
        one = _reserve(context.store, copy_id)
        assert isinstance(one, tuple) and (one[0].node_id, one[0].gpus) == ("node-m", gpus)
