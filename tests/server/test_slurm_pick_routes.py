"""A workflow's Slurm picks at submission (issue 35), through the real app and the typed client: where Berth's node
agents place copies a pick is refused rather than ignored; where Slurm places them, a partition, account or time
limit beyond what the cluster lets a workflow pick is refused in one line before Slurm is asked anything."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from berth.api_client import ApiClient
from berth.errors import UserInputError
from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext

pytestmark = pytest.mark.timeout(60)
ALICE = Identity(user="alice", groups=("team",), org="acme")


def _client(context: ServerContext) -> ApiClient:
    transport = httpx.ASGITransport(app=create_app(context))
    return ApiClient("http://api", context.signing.api_token(ALICE), transport=transport)


async def test_a_pick_where_berths_node_agents_place_copies_is_refused_not_ignored(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    async with _client(context) as api:
        with pytest.raises(UserInputError) as refused:
            await api.start_workflow("GPT-OSS 20B", {"SlurmPartition": "long"})
    assert str(refused.value) == ("SlurmPartition, SlurmAccount and SlurmTimeLimit apply where Slurm places copies; "
                                  "this cluster places them with Berth's node agents: leave them empty.")


async def test_a_pick_beyond_the_clusters_lists_is_refused_before_slurm_is_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_PLACEMENT_BACKEND", "slurm")
    monkeypatch.setenv("BERTH_SLURM_SELECTABLE_PARTITIONS", "gpu,long")
    monkeypatch.setenv("BERTH_SLURM_MAX_TIME_LIMIT", "1-00:00:00")
    monkeypatch.setenv("BERTH_SLURM_CONF", str(tmp_path / "no-such-slurm.conf"))  # Slurm is never asked
    context = build_context(tmp_path, "127.0.0.1:1")
    assert context.slurm.selectable_partitions == ["gpu", "long"]  # read once, at start
    async with _client(context) as api:
        with pytest.raises(UserInputError) as refused:
            await api.start_workflow("GPT-OSS 20B", {"SlurmPartition": "debug"})
        assert str(refused.value) == ("SlurmPartition=debug is not a partition this cluster lets a workflow pick: "
                                      "pick one of gpu, long, or leave it empty for the cluster's own.")
        with pytest.raises(UserInputError, match=r"^SlurmTimeLimit=2-0 is longer than this cluster allows"):
            await api.start_workflow("GPT-OSS 20B", {"SlurmTimeLimit": "2-0"})


def test_an_invalid_slurm_setting_stops_the_api_at_start_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_PLACEMENT_BACKEND", "slurm")
    monkeypatch.setenv("BERTH_SLURM_MAX_TIME_LIMIT", "two days")
    with pytest.raises(UserInputError, match=r"^Slurm setting max_time_limit: String should match pattern"):
        build_context(tmp_path, "127.0.0.1:1")
