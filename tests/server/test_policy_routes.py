"""Policies through the real app and the typed client: an administrator sets, replaces and removes them; a user reads
only those that bind them and may set none; bad input is one line. A start outside an allow-list or the deploy hours,
or past a quota, is refused naming the policy and what is in use; the autoscaler's allowance and a scale stop at the
quota; capacity lists only the entries the caller may start; explain placement names the quota."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import ReserveRequest
from berth.contracts.policies import PolicyRules
from berth.contracts.rollouts import WorkflowUpdateRequest
from berth.contracts.workflows import Phase
from berth.errors import NotFoundError, PermissionDeniedError, UserInputError
from berth.security import Identity
from catalog.definition import WorkflowDefinition
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from node.inventory import simulated_gpus
from server.app import build_context, create_app
from server.context import ServerContext
from server.policy_check import check_scale
from server.submission import new_rows
from workflows.payloads import PoolStatus, ScaleRequest, ScaleResult

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
BOB = Identity(user="bob", groups=("other",), org="elsewhere")
CODER = "Qwen3-Coder 30B"  # 2 GPUs of ≥ 49 GB a copy


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """Alice's Qwen3-Coder 30B copy holds node-1's two 80 GB GPUs; node-2's two are free."""
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    for who in (ALICE, BOB):
        context.store.ensure_user(who.user, org=who.org, groups=list(who.groups))
    for node_id in ("node-1", "node-2"):
        context.store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "simulator",
                                               "gpus": simulated_gpus("2x80GB", node_id)}, 30000)
    entry = load_catalog()[CODER]
    definition = render(entry, resolve_values(entry, {}))
    row, endpoint = new_rows(entry, definition, ALICE, "wf-coder")
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    assert _reserve(context, "wf-coder.copy-0").placement is not None
    return context


def _reserve(context: ServerContext, copy_id: str) -> object:
    return context.store.placements.reserve(ReserveRequest(workflow_id="wf-coder", copy_id=copy_id, nodes=1,
                                                           gpus_per_node=2, gpu_memory_gb=49.0))


def _client(context: ServerContext, who: Identity) -> ApiClient:
    transport = httpx.ASGITransport(app=create_app(context))
    return ApiClient("http://api", context.signing.api_token(who), transport=transport)


async def _set(context: ServerContext, kind: str, name: str, rules: PolicyRules) -> None:
    async with _client(context, ADMIN) as api:
        await api.set_policy(kind, name, rules)  # type: ignore[arg-type]


async def test_an_administrator_sets_and_users_read_only_the_policies_that_bind_them(context: ServerContext) -> None:
    async with _client(context, ADMIN) as api:
        team = await api.set_policy("group", "team", PolicyRules(max_gpus=8, entries=[CODER]))
        assert (team.kind, team.name, team.set_by, team.rules.max_gpus) == ("group", "team", "admin", 8)
        assert team.in_use is not None and (team.in_use.gpus, team.in_use.copies) == (2, 1)  # alice's copy
        await api.set_policy("organization", "elsewhere", PolicyRules(deploy_hours="22-06"))
        replaced = await api.set_policy("group", "team", PolicyRules(max_copies=3))
        assert (replaced.rules.max_gpus, replaced.rules.entries, replaced.rules.max_copies) == (None, None, 3)
        assert [(p.kind, p.name) for p in await api.policies()] == [("group", "team"), ("organization", "elsewhere")]
    async with _client(context, ALICE) as api:
        assert [(p.kind, p.name) for p in await api.policies()] == [("group", "team")]
        assert (await api.policy("group", "team")).rules.max_copies == 3
        with pytest.raises(NotFoundError, match="No policy for organization 'elsewhere' that binds you"):
            await api.policy("organization", "elsewhere")  # bob's organization's: absent to alice
    async with _client(context, BOB) as api:
        assert [(p.kind, p.name) for p in await api.policies()] == [("organization", "elsewhere")]
    async with _client(context, ADMIN) as api:
        removed = await api.remove_policy("group", "team")
        assert removed.removed
        with pytest.raises(NotFoundError, match="No policy for group 'team'"):
            await api.remove_policy("group", "team")


async def test_a_user_may_not_set_or_remove_and_bad_input_is_one_line(context: ServerContext) -> None:
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError):
            await api.set_policy("group", "team", PolicyRules(max_gpus=100))
        with pytest.raises(PermissionDeniedError):
            await api.remove_policy("group", "team")
    async with _client(context, ADMIN) as api:
        with pytest.raises(NotFoundError, match="No group named 'nobody' on this cluster"):
            await api.set_policy("group", "nobody", PolicyRules(max_gpus=1))
        for rules, words in (({"deploy_hours": "8am-6pm"}, "deploy_hours must read START-END"),
                             ({"max_gpus": -1}, "max_gpus"), ({"max_gpus": True}, "max_gpus"),
                             ({"entries": ["x"] * 65}, "entries"), ({"speed": 1}, "speed")):
            with pytest.raises(UserInputError) as raised:  # 422 (CapacityError's status) is a UserInputError
                await api.request("PUT", "/v1/policies/group/team", json=rules)
            line = str(raised.value)
            assert words in line and "\n" not in line, line
        with pytest.raises(UserInputError, match="path.kind"):
            await api.request("GET", "/v1/policies/team/alice")


async def test_a_start_outside_an_allow_list_or_the_hours_or_past_a_quota_is_refused_naming_it(
        context: ServerContext) -> None:
    await _set(context, "group", "team", PolicyRules(entries=["GPT-OSS 20B", CODER], max_gpus=3))
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError) as refused:
            await api.start_workflow("vLLM", {"Model": "hf://meta-llama/Llama-3.1-8B"})
        assert str(refused.value) == (
            "Refused by policy group/team: it allows the entries GPT-OSS 20B, Qwen3-Coder 30B, not 'vLLM'.")
        with pytest.raises(PermissionDeniedError) as refused:
            await api.start_workflow(CODER, {})
        assert str(refused.value) == "Refused by policy group/team: max_gpus 3, 2 in use, this needs 2 more."
    hour = datetime.now(UTC).hour
    await _set(context, "organization", "acme", PolicyRules(deploy_hours=f"{(hour + 2) % 24:02}-{(hour + 3) % 24:02}"))
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError, match=r"^Refused by policy organization/acme: deploys are allowed"):
            await api.start_workflow(CODER, {})
    await _set(context, "user", "alice", PolicyRules(model_sources=["hf://meta-llama/"]))
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError, match=r"^Refused by policy user/alice: model hf://Qwen/"):
            await api.start_workflow(CODER, {})
    async with _client(context, BOB) as api:  # bound by none of them: refused by nothing but the missing Temporal
        with pytest.raises(Exception) as other:
            await api.start_workflow(CODER, {})
        assert "policy" not in str(other.value)


async def test_a_scale_and_the_autoscalers_allowance_stop_at_the_quota(context: ServerContext) -> None:
    await _set(context, "user", "alice", PolicyRules(max_gpus=4))
    async with _client(context, ADMIN) as api:
        allowance = await api.scale_allowance("wf-coder", current=1, wanted=3)
        assert (allowance.allowed, allowance.refusal) == (
            2, "Refused by policy user/alice: max_gpus 4, 2 in use, this needs 4 more.")
        assert (await api.scale_allowance("wf-coder", current=1, wanted=2)).refusal is None
        assert (await api.scale_allowance("wf-coder", current=3, wanted=1)).allowed == 1  # scaling in: always
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError):  # the autoscaler's (an administrator's) route
            await api.scale_allowance("wf-coder", current=1, wanted=3)
    row = context.store.workflow("wf-coder")
    definition = WorkflowDefinition.model_validate(context.store.workflow_definition(row))
    check_scale(context, "wf-coder", definition, 1, 2)
    with pytest.raises(PermissionDeniedError, match=r"^Refused by policy user/alice: max_gpus 4, 2 in use, this needs"):
        check_scale(context, "wf-coder", definition, 1, 3)


async def test_a_copy_past_the_quota_is_not_placed_and_explain_placement_names_it(context: ServerContext) -> None:
    await _set(context, "organization", "acme", PolicyRules(max_copies=1))
    result = _reserve(context, "wf-coder.copy-1")
    line = "Refused by policy organization/acme: max_copies 1, 1 in use, this needs 1 more."
    assert getattr(result, "blocked_reason", None) == line and getattr(result, "placement", 1) is None
    async with _client(context, ALICE) as api:
        answer = await api.explain_placement("wf-coder")
    placed, following = answer.copies
    assert placed.placed and placed.fits_now  # a placed copy already counts in the quota
    assert (following.fits_now, following.blocked_reason) == (False, line)
    assert {n.node: n.outcome for n in following.nodes} == {"node-1": "busy", "node-2": "quota"}
    assert following.advice[0].startswith("Refused by policy organization/acme: max_copies 1")


async def test_capacity_lists_only_the_entries_the_callers_allow_lists_name(context: ServerContext) -> None:
    await _set(context, "group", "team", PolicyRules(entries=[CODER]))
    async with _client(context, ALICE) as api:
        assert [fit.entry for fit in (await api.capacity()).entries] == [CODER]
    async with _client(context, BOB) as api:
        assert len((await api.capacity()).entries) > 1


@dataclass
class PoolAtOne:
    """A Temporal client whose every pool answers its status at one copy on revision 1 and records the updates sent
    to it: the scale and update routes reach it only past their policy checks."""

    updates: list[tuple[str, Any]] = field(default_factory=list)

    def get_workflow_handle(self, workflow_id: str) -> PoolAtOne:
        return self

    async def query(self, *_args: Any, **_kwargs: Any) -> PoolStatus:
        return PoolStatus(workflow_id="wf-coder", phase=Phase.READY, desired_copies=1, copies=(), events=())

    async def execute_update(self, update: Any, argument: Any, **_kwargs: Any) -> Any:
        self.updates.append((getattr(update, "__name__", str(update)), argument))
        if isinstance(argument, ScaleRequest):
            return ScaleResult(previous=1, desired=argument.replicas, message="scaled")
        raise AssertionError(f"unexpected update {update}")


async def test_a_scale_or_a_rollout_past_a_quota_is_refused_before_the_workflow_is_told(
        context: ServerContext) -> None:
    temporal = PoolAtOne()
    context._temporal = temporal  # type: ignore[assignment]
    row = context.store.workflow("wf-coder")
    context.store.revisions.add_revision(row.id, 1, context.store.workflow_definition(row), {}, ALICE.user)
    await _set(context, "user", "alice", PolicyRules(max_gpus=4))
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError) as refused:
            await api.scale_workflow("wf-coder", 3)
        assert str(refused.value) == "Refused by policy user/alice: max_gpus 4, 2 in use, this needs 4 more."
        assert temporal.updates == []
        assert (await api.scale_workflow("wf-coder", 2)).desired == 2  # exactly the quota
        assert [(name, request.replicas) for name, request in temporal.updates] == [("scale", 2)]
    await _set(context, "group", "team", PolicyRules(max_gpus=2))
    async with _client(context, ADMIN) as api:  # an administrator's rollout is held to the owner's policies
        with pytest.raises(PermissionDeniedError) as refused:
            await api.update_workflow("wf-coder", WorkflowUpdateRequest(values={"MaxContextSize": 8192}))
        # The smaller context needs one GPU a copy: the surge copy's one is past the group's two, all held.
        assert str(refused.value) == "Refused by policy group/team: max_gpus 2, 2 in use, this needs 1 more."
    assert len(temporal.updates) == 1  # the rollout never reached the workflow


async def test_every_policy_set_removed_or_refusing_goes_through_the_one_event_function(
        context: ServerContext, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="berth.policies")
    await _set(context, "user", "alice", PolicyRules(entries=["GPT-OSS 20B"]))
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError):
            await api.start_workflow(CODER, {})
    async with _client(context, ADMIN) as api:
        await api.remove_policy("user", "alice")
    assert [record.getMessage().split(":")[0] for record in caplog.records if record.name == "berth.policies"] == [
        "policy_set", "policy_refused", "policy_removed"]
    refused = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("policy_refused"))
    assert "user/alice" in refused and "Refused by policy user/alice: it allows the entries GPT-OSS 20B" in refused


async def test_policy_events_reach_the_event_stream_and_a_refusal_is_seen_by_its_user(
        context: ServerContext) -> None:
    await _set(context, "user", "alice", PolicyRules(entries=["GPT-OSS 20B"]))
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError):
            await api.start_workflow(CODER, {})
        seen = await api.events(kind="policy")
    assert [(e.kind.value, e.actor) for e in seen.events] == [("policy.refused", "alice")]
    assert seen.events[0].message.startswith("Refused by policy user/alice: it allows the entries GPT-OSS 20B")
    async with _client(context, ADMIN) as api:
        everything = await api.events(kind="policy")
    assert [e.kind.value for e in everything.events] == ["policy.set", "policy.refused"]
    assert everything.events[0].message == f"policy user/alice set by {ADMIN.user}"


async def test_a_slurm_copy_holds_a_reservation_its_quota_counts_and_no_nodes_gpus(context: ServerContext) -> None:
    """Issue 35: Slurm picks the nodes, so a Slurm copy's reservation takes none of Berth's nodes' GPUs or ports;
    it is what quotas count (and what its publish and release go by), so the quota refuses the next one."""
    await _set(context, "group", "team", PolicyRules(max_gpus=4))
    request = ReserveRequest(workflow_id="wf-coder", copy_id="wf-coder.copy-1", nodes=1, gpus_per_node=2,
                             placed_by="slurm")
    placed = context.store.placements.reserve(request)
    assert placed.placement is not None and [r.node_id for r in placed.placement.ranks] == ["slurm"]
    snapshot = context.store.placements.capacity_snapshot()
    assert sorted(snapshot.holders.values()) == ["wf-coder.copy-0", "wf-coder.copy-0"]  # node GPUs: copy-0's only
    refused = context.store.placements.reserve(request.model_copy(update={"copy_id": "wf-coder.copy-2"}))
    assert refused.blocked_reason == "Refused by policy group/team: max_gpus 4, 4 in use, this needs 2 more."
    assert context.store.placements.release("wf-coder.copy-1")
