"""Policy routes (docs/policies.md): administrators set, replace and remove the policies of users, groups and
organizations; anyone reads the policies that bind them (their own, their groups', their organization's) with what
each counts in use now — never another's. The autoscaler asks here how far a pool may grow before it scales out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.concurrency import run_in_threadpool

from berth.contracts.base import NAME_PATTERN
from berth.contracts.policies import (
    Policy,
    PolicyKind,
    PolicyRemoved,
    PolicyRules,
    PolicyUsage,
    ScaleAllowance,
    ScaleAllowanceRequest,
)
from berth.errors import NotFoundError
from berth.security import Identity
from catalog.definition import WorkflowDefinition
from server import policy_rules
from server.context import Context, ServerContext
from server.guards import Admin, Caller
from server.policy_check import policy_event, scale_headroom, subject_of
from server.store.policies import Policies

router = APIRouter()
PolicyName = Annotated[str, Path(max_length=128, pattern=NAME_PATTERN)]


def _with_usage(context: ServerContext, policies: list[Policy]) -> list[Policy]:
    usage = policy_rules.tally(policies, Policies(context.store).held())
    return [p.model_copy(update={"in_use": PolicyUsage(gpus=usage[policy_rules.label(p)].gpus,
                                                       copies=usage[policy_rules.label(p)].copies)})
            for p in policies]


def _visible(context: ServerContext, who: Identity) -> list[Policy]:
    """Every policy for an administrator; for anyone else, those that bind them."""
    policies = Policies(context.store).all()
    shown = policies if who.admin else policy_rules.applying(policies, subject_of(who))
    return _with_usage(context, shown)


@router.get("/v1/policies")
async def list_policies(context: Context, who: Caller) -> list[Policy]:
    return await run_in_threadpool(_visible, context, who)


def _one(context: ServerContext, who: Identity, kind: PolicyKind, name: str) -> Policy:
    found = [p for p in _visible(context, who) if p.kind == kind and p.name == name]
    if not found:  # another's policy reads as absent: its existence is not the caller's to learn
        raise NotFoundError(f"No policy for {kind} '{name}' that binds you. `berth policy list` shows yours.")
    return found[0]


@router.get("/v1/policies/{kind}/{name}")
async def show_policy(kind: PolicyKind, name: PolicyName, context: Context, who: Caller) -> Policy:
    return await run_in_threadpool(_one, context, who, kind, name)


def _set(context: ServerContext, kind: PolicyKind, name: str, rules: PolicyRules, by: str) -> Policy:
    store = Policies(context.store)
    if not store.subject_known(kind, name):  # a policy for nobody binds nobody: a typo would pass unseen
        raise NotFoundError(f"No {kind} named '{name}' on this cluster; `berth user list` shows users, their groups "
                            "and organizations.")
    policy = store.put(kind, name, rules, by)
    policy_event(context.store, "policy_set", f"{kind}/{name}", by, rules.model_dump_json(exclude_none=True))
    return _with_usage(context, [policy])[0]


@router.put("/v1/policies/{kind}/{name}")
async def set_policy(kind: PolicyKind, name: PolicyName, body: PolicyRules, context: Context, who: Admin) -> Policy:
    """Set (replace) the policy: each rule the body leaves out allows anything. Applies from the next request."""
    return await run_in_threadpool(_set, context, kind, name, body, who.user)


def _remove(context: ServerContext, kind: PolicyKind, name: str, by: str) -> PolicyRemoved:
    if not Policies(context.store).remove(kind, name):
        raise NotFoundError(f"No policy for {kind} '{name}'; `berth policy list` shows them.")
    policy_event(context.store, "policy_removed", f"{kind}/{name}", by, "")
    return PolicyRemoved(kind=kind, name=name, removed=True)


@router.delete("/v1/policies/{kind}/{name}")
async def remove_policy(kind: PolicyKind, name: PolicyName, context: Context, who: Admin) -> PolicyRemoved:
    return await run_in_threadpool(_remove, context, kind, name, who.user)


def _allowance(context: ServerContext, workflow_id: str, request: ScaleAllowanceRequest) -> ScaleAllowance:
    row = context.store.workflow(workflow_id)
    definition = WorkflowDefinition.model_validate(context.store.workflow_definition(row))
    allowed, refusal = scale_headroom(context, workflow_id, definition, request.current, request.wanted)
    return ScaleAllowance(allowed=allowed, refusal=refusal)


@router.post("/v1/internal/workflows/{workflow_id}/scale-allowance")
async def scale_allowance(workflow_id: str, body: ScaleAllowanceRequest, context: Context,
                          _: Admin) -> ScaleAllowance:
    """How far the quotas let the pool grow from `current` toward `wanted` now (the autoscaler, before it scales)."""
    return await run_in_threadpool(_allowance, context, workflow_id, body)
