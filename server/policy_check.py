"""Where policies are enforced (docs/policies.md): at a deploy (start, rollout: allow-lists and hours), at a start, a
scale, a rollout's surge and an autoscaler's scale-out (quotas, asked before the workflow is told), and at every
copy's placement (quotas again, under the placement lock: the one check no race gets past). Reads the store and
calls server/policy_rules.py; a refusal is one PermissionDeniedError line naming the policy, and is recorded by
`policy_event`. Blocking: call these off the event loop."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from berth.contracts.choices import RolloutKind
from berth.contracts.events import EventKind
from berth.contracts.rollouts import RolloutStrategy
from berth.errors import PermissionDeniedError
from berth.security import Identity
from catalog.definition import WorkflowDefinition
from server import policy_rules
from server.events import Audience, EventDraft, record
from server.policy_rules import Ask, Subject
from server.store.policies import Policies

if TYPE_CHECKING:
    from server.context import ServerContext
    from server.store.database import Store

log = logging.getLogger("berth.policies")
PolicyEventKind = Literal["policy_set", "policy_removed", "policy_refused"]


def policy_event(store: Store, kind: PolicyEventKind, policy: str, user: str, detail: str) -> None:
    """THE one place a policy event is recorded, in the cluster's event stream (server/events.py) and the control
    plane's log: a policy set or removed (`policy`: kind/name, by `user`; administrators see it) or a request refused
    by one (`user`: whose request — user/NAME, or workflow/ID for a scale —, `detail`: the refusal line, which names
    the policy; its user, or the workflow's readers, see it too)."""
    log.info("%s: %s by %s: %s", kind, policy, user, detail)
    refused_kind, _, refused_name = user.partition("/")
    if kind == "policy_refused":
        draft = EventDraft(kind=EventKind.POLICY_REFUSED, message=detail,
                           workflow_id=refused_name if refused_kind == "workflow" else None,
                           audience=Audience.of_user(refused_name) if refused_kind == "user" else None,
                           actor=refused_name if refused_kind == "user" else None)
    else:
        verb = "set" if kind == "policy_set" else "removed"
        draft = EventDraft(kind=EventKind.POLICY_SET, message=f"policy {policy} {verb} by {user}", actor=user,
                           audience=Audience(), details={"rules": detail} if detail else {})
    record(store, draft)


def subject_of(who: Identity) -> Subject:
    return Subject(user=who.user, org=who.org, groups=tuple(who.groups))


def model_sources(definition: WorkflowDefinition, values: dict[str, Any]) -> tuple[str, ...]:
    """The names the definition's model goes by: the Model value given (hf://org/name or model://NAME), the
    registered model it resolved to, and the repository its weights come from (an entry's own model)."""
    sources = []
    given = values.get("Model")
    if isinstance(given, str) and given:
        sources.append(given)
    if definition.model_ref:
        sources.append(definition.model_ref)
    if definition.weights is not None:
        sources.append(f"hf://{definition.weights.repo}")
    return tuple(dict.fromkeys(sources))


def gpus_per_copy(definition: WorkflowDefinition) -> int:
    replica = definition.replica
    return 0 if replica is None else replica.nodes * replica.gpus_per_node


def refuse(context: ServerContext, line: str, refused: str) -> None:
    """Record and raise a refusal of `refused`'s request (user/NAME, or the workflow a scale was for)."""
    policy_event(context.store, "policy_refused", refused, refused, line)
    raise PermissionDeniedError(line)


def check_deploy(context: ServerContext, subject: Subject, definition: WorkflowDefinition, values: dict[str, Any],
                 resolved_values: dict[str, Any] | None = None) -> None:
    """Refuse a start or a rollout that an allow-list or deploy hours forbid. `resolved_values`: the values as
    rendered (a registered model's source in place of its model://NAME)."""
    policies = Policies(context.store).all()
    if not policies:
        return
    sources = model_sources(definition, values)
    if resolved_values is not None:
        sources = tuple(dict.fromkeys(sources + model_sources(definition, resolved_values)))
    ask = Ask(entry=definition.entry, model_sources=sources if definition.replica is not None else (),
              at=datetime.now(UTC))
    line = policy_rules.decide(policies, subject, ask, {})
    if line is not None:
        refuse(context, line, f"user/{subject.user}")


def check_quota(context: ServerContext, subject: Subject, gpus: int, copies: int,
                except_workflow: str | None = None) -> None:
    """Refuse `copies` more copies holding `gpus` more GPUs when a quota binding `subject` would be exceeded;
    `except_workflow`: left out of what is held (a scale states that workflow's whole new size)."""
    store = Policies(context.store)
    policies = policy_rules.applying(store.all(), subject)
    if not policies or copies <= 0:
        return
    usage = policy_rules.tally(policies, store.held(), except_workflow)
    line = policy_rules.decide(policies, subject, Ask(gpus=gpus, copies=copies), usage)
    if line is not None:
        refuse(context, line, f"user/{subject.user}")


def scale_headroom(context: ServerContext, workflow_id: str, definition: WorkflowDefinition,
                   current: int, wanted: int) -> tuple[int, str | None]:
    """The largest size from `current` up to `wanted` the quotas allow the workflow now, and the refusal line for
    the first copy beyond it (None when `wanted` is allowed): what the autoscaler scales to instead."""
    if wanted <= current:
        return wanted, None
    store = Policies(context.store)
    subject = store.subject(workflow_id)
    policies = policy_rules.applying(store.all(), subject) if subject is not None else []
    if not policies or subject is None:
        return wanted, None
    usage = policy_rules.tally(policies, store.held(), except_workflow=workflow_id)
    per_copy = gpus_per_copy(definition)
    # The workflow counts at its current size (placed or not): it grows from there.
    grown = {name: policy_rules.Usage(u.gpus + current * per_copy, u.copies + current) for name, u in usage.items()}
    allowed, line = policy_rules.copies_allowed(policies, subject, per_copy, grown, wanted - current)
    return current + allowed, line


def check_scale(context: ServerContext, workflow_id: str, definition: WorkflowDefinition, current: int,
                wanted: int) -> None:
    """Refuse a scale from `current` to `wanted` copies that a quota would not allow (a scale-in always passes)."""
    allowed, line = scale_headroom(context, workflow_id, definition, current, wanted)
    if allowed < wanted and line is not None:
        refuse(context, line, f"workflow/{workflow_id}")


def check_start(context: ServerContext, who: Identity, definition: WorkflowDefinition) -> None:
    """Refuse a start whose first copies (MinReplicas, at least one) would exceed a quota binding the caller."""
    if definition.replica is None:
        return  # a service holds a port, no GPU: no quota counts it
    copies = max(definition.pool.min_replicas, 1)
    check_quota(context, subject_of(who), copies * gpus_per_copy(definition), copies)


def quotas_set(context: ServerContext) -> bool:
    """Whether any policy sets a quota (else a scale need not ask the workflow its size first)."""
    return any(p.rules.max_gpus is not None or p.rules.max_copies is not None for p in Policies(context.store).all())


def check_surge(context: ServerContext, workflow_id: str, definition: WorkflowDefinition, strategy: RolloutStrategy,
                desired: int) -> None:
    """Refuse a rollout whose extra copies (a rolling one's surge; a canary's or blue-green's whole new set) would
    exceed a quota beside what the workflow already holds. A surge copy placed later is held to it again."""
    extra = min(strategy.max_surge, desired) if strategy.kind is RolloutKind.ROLLING else desired
    subject = Policies(context.store).subject(workflow_id)
    if subject is not None and definition.replica is not None:
        check_quota(context, subject, extra * gpus_per_copy(definition), extra)
