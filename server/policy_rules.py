"""Policy decisions: given who deploys, what (entry, model source, when) and how much more (GPUs, copies), and what
the workflows each policy counts already hold, allowed (None) or ONE refusal line naming the policy and the figures.
Pure: no I/O — server/policy_check.py reads the store and calls these.

Every policy that applies must allow a request (so the strictest wins): the user's own, each of their groups', their
organization's. When several refuse, the line names the one to act on first: an allow-list before the hours before
a quota, and among quotas the one with the least room left."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from berth.contracts.policies import Policy, PolicyKind, PolicyRules, deploy_window
from berth.errors import shown

KIND_ORDER: dict[PolicyKind, int] = {"user": 0, "group": 1, "organization": 2}
MAX_NAMED = 5  # allowed names a refusal lists before "and N more"


@dataclass(frozen=True)
class Subject:
    """Whom policies bind: a workflow's owner, their organization and their groups (the caller's at start; the
    ones recorded on its endpoint afterwards)."""

    user: str
    org: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ask:
    """What one request asks: a deploy (start, rollout) names its entry, model sources and time; a quota check names
    the GPUs and copies it would add on top of what is held."""

    entry: str | None = None
    # The names a model goes by (hf://org/name, model://NAME); empty: no model (a gateway, OpenCode) or not a deploy.
    model_sources: tuple[str, ...] = ()
    at: datetime | None = None  # when it deploys (UTC); None: not a deploy (scale, autoscale, surge placement)
    gpus: int = 0
    copies: int = 0


@dataclass(frozen=True)
class Usage:
    gpus: int = 0
    copies: int = 0


@dataclass(frozen=True)
class HeldCopy:
    """One placed copy, as the quotas count it: its workflow, that workflow's owner, organization and groups."""

    workflow_id: str
    owner: str
    org: str
    groups: tuple[str, ...]
    gpus: int


def label(policy: Policy) -> str:
    return f"{policy.kind}/{policy.name}"


def binds(policy: Policy, subject: Subject) -> bool:
    if policy.kind == "user":
        return policy.name == subject.user
    if policy.kind == "group":
        return policy.name in subject.groups
    return policy.name == subject.org


def applying(policies: Iterable[Policy], subject: Subject) -> list[Policy]:
    """The policies that bind `subject`, user first, then groups by name, then the organization."""
    return sorted((p for p in policies if binds(p, subject)), key=lambda p: (KIND_ORDER[p.kind], p.name))


def counts(policy: Policy, copy: HeldCopy) -> bool:
    """Whether `policy`'s quota counts `copy`: a user's, the copies of workflows they own; a group's, of workflows
    started by its members as members (the groups recorded on the workflow's endpoint); an organization's, of
    workflows its users own."""
    return binds(policy, Subject(copy.owner, copy.org, copy.groups))


def tally(policies: Iterable[Policy], held: Iterable[HeldCopy], except_workflow: str | None = None) -> dict[str, Usage]:
    """What each policy counts in use (by `label`), leaving out `except_workflow`'s copies (a scale that states
    the workflow's whole new size)."""
    kept = [copy for copy in held if copy.workflow_id != except_workflow]
    return {label(p): Usage(gpus=sum(c.gpus for c in kept if counts(p, c)), copies=sum(1 for c in kept if counts(p, c)))
            for p in policies}


def in_window(hours: str, at: datetime) -> bool:
    """Whether `at` (UTC) falls in `hours`: start ≤ t < end; a start after the end wraps past midnight."""
    start, end = deploy_window(hours)
    minute = at.hour * 60 + at.minute
    return start <= minute < end if start < end else minute >= start or minute < end


def prefix_match(source: str, prefixes: Sequence[str]) -> bool:
    return any(source.startswith(prefix) for prefix in prefixes)


def _listed(names: Sequence[str]) -> str:
    shown_names = ", ".join(shown(name, 60) for name in names[:MAX_NAMED])
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return (shown_names + more) or "none"


def _deploy_refusal(policy: Policy, ask: Ask) -> str | None:
    rules: PolicyRules = policy.rules
    head = f"Refused by policy {label(policy)}"
    if ask.entry is not None and rules.entries is not None and ask.entry not in rules.entries:
        return f"{head}: it allows the entries {_listed(rules.entries)}, not '{shown(ask.entry, 60)}'."
    if ask.model_sources and rules.model_sources is not None \
            and not any(prefix_match(source, rules.model_sources) for source in ask.model_sources):
        return (f"{head}: model {shown(ask.model_sources[0], 100)} starts with none of its model sources "
                f"({_listed(rules.model_sources)}).")
    if ask.at is not None and rules.deploy_hours is not None and not in_window(rules.deploy_hours, ask.at):
        return f"{head}: deploys are allowed {rules.deploy_hours} UTC only; it is {ask.at:%H:%M} UTC now."
    return None


def _quota_refusals(applied: Sequence[Policy], ask: Ask, usage: Mapping[str, Usage]) -> list[tuple[int, str]]:
    """(room left, line) for each quota `ask` would exceed."""
    found = []
    for policy in applied:
        used = usage.get(label(policy), Usage())
        for name, limit, held, more in (("max_gpus", policy.rules.max_gpus, used.gpus, ask.gpus),
                                        ("max_copies", policy.rules.max_copies, used.copies, ask.copies)):
            if limit is not None and more > 0 and held + more > limit:
                found.append((limit - held, f"Refused by policy {label(policy)}: {name} {limit}, {held} in use, "
                                            f"this needs {more} more."))
    return found


def decide(policies: Iterable[Policy], subject: Subject, ask: Ask, usage: Mapping[str, Usage]) -> str | None:
    """None when every policy binding `subject` allows `ask`; else the one refusal line to act on first."""
    applied = applying(policies, subject)
    for policy in applied:
        refusal = _deploy_refusal(policy, ask)
        if refusal is not None:
            return refusal
    quotas = _quota_refusals(applied, ask, usage)
    return min(quotas)[1] if quotas else None


def entry_allowed(policies: Iterable[Policy], subject: Subject, entry: str) -> bool:
    """Whether the allow-lists binding `subject` let them start `entry` (hours and quotas aside: capacity lists what
    may be started at all)."""
    return all(p.rules.entries is None or entry in p.rules.entries for p in applying(policies, subject))


def copies_allowed(policies: Iterable[Policy], subject: Subject, gpus_per_copy: int, usage: Mapping[str, Usage],
                   wanted: int) -> tuple[int, str | None]:
    """How many of `wanted` more copies of `gpus_per_copy` GPUs the quotas allow now, and the refusal line for the
    first one refused (None when all are allowed)."""
    applied = applying(policies, subject)
    for more in range(wanted, 0, -1):
        if not _quota_refusals(applied, Ask(gpus=more * gpus_per_copy, copies=more), usage):
            if more == wanted:
                return wanted, None
            return more, decide(applied, subject, Ask(gpus=(more + 1) * gpus_per_copy, copies=more + 1), usage)
    if wanted <= 0:
        return 0, None
    return 0, decide(applied, subject, Ask(gpus=gpus_per_copy, copies=1), usage)
