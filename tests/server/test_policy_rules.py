"""The policy decisions (server/policy_rules.py) on their own: which policies bind whom, allow-lists of entries and
model-source prefixes, deploy hours that wrap past midnight, quotas counted per user, group and organization, the
strictest of several policies winning, and each refusal one line naming the policy and what is in use."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from berth.contracts.policies import Policy, PolicyKind, PolicyRules, deploy_window
from server.policy_rules import (
    Ask,
    HeldCopy,
    Subject,
    Usage,
    applying,
    copies_allowed,
    decide,
    entry_allowed,
    in_window,
    tally,
)

pytestmark = pytest.mark.timeout(10)
ALICE = Subject(user="alice", org="acme", groups=("ml-team", "infra"))


def policy(kind: PolicyKind, name: str, **rules: object) -> Policy:
    return Policy(kind=kind, name=name, rules=PolicyRules.model_validate(rules), set_by="admin", set_at=0.0)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 12, 6, hour, minute, tzinfo=UTC)


def test_a_policy_binds_its_user_the_members_of_its_group_and_everyone_of_its_organization() -> None:
    policies = [policy("organization", "acme"), policy("group", "ml-team"), policy("user", "alice"),
                policy("user", "bob"), policy("group", "other"), policy("organization", "globex")]
    assert [f"{p.kind}/{p.name}" for p in applying(policies, ALICE)] == [
        "user/alice", "group/ml-team", "organization/acme"]


@pytest.mark.parametrize(("hours", "time", "inside"), [
    ("08-18", at(8), True), ("08-18", at(17, 59), True), ("08-18", at(18), False), ("08-18", at(7, 59), False),
    ("22:30-06:00", at(23), True), ("22:30-06:00", at(0), True), ("22:30-06:00", at(5, 59), True),
    ("22:30-06:00", at(6), False), ("22:30-06:00", at(22, 29), False), ("22:30-06:00", at(12), False),
    ("00-24", at(23, 59), True), ("18-8", at(3), True),
])
def test_deploy_hours_are_utc_and_a_start_after_the_end_wraps_past_midnight(hours: str, time: datetime,
                                                                            inside: bool) -> None:
    assert in_window(hours, time) is inside


@pytest.mark.parametrize("hours", ["8", "25-03", "08-18-20", "8am-6pm", "08:60-09", "24:30-02", "09-09", "24-02",
                                   "00-24:00x"])
def test_deploy_hours_that_are_none_are_refused_in_one_line(hours: str) -> None:
    with pytest.raises(ValidationError) as raised:
        PolicyRules(deploy_hours=hours)
    assert "deploy_hours" in str(raised.value) or "past 24:00" in str(raised.value)
    with pytest.raises(ValueError):
        deploy_window(hours)


def test_an_entry_outside_the_allow_list_is_refused_naming_the_policy_and_the_allowed_entries() -> None:
    policies = [policy("group", "ml-team", entries=["GPT-OSS 20B", "Qwen3-Coder 30B"])]
    assert decide(policies, ALICE, Ask(entry="GPT-OSS 20B"), {}) is None
    assert decide(policies, ALICE, Ask(entry="Llama 3 70B"), {}) == (
        "Refused by policy group/ml-team: it allows the entries GPT-OSS 20B, Qwen3-Coder 30B, not 'Llama 3 70B'.")
    assert decide(policies, Subject("bob", "acme"), Ask(entry="Llama 3 70B"), {}) is None  # not a member
    assert entry_allowed(policies, ALICE, "GPT-OSS 20B") and not entry_allowed(policies, ALICE, "Llama 3 70B")
    assert decide([policy("user", "alice", entries=[])], ALICE, Ask(entry="GPT-OSS 20B"), {}) is not None


def test_model_sources_are_prefixes_and_any_name_of_the_model_may_match() -> None:
    policies = [policy("organization", "acme", model_sources=["hf://meta-llama/", "model://approved-"])]
    allowed = decide(policies, ALICE, Ask(model_sources=("hf://meta-llama/Llama-3.1-8B",)), {})
    registered = decide(policies, ALICE, Ask(model_sources=("model://approved-llama", "hf://other/x")), {})
    assert allowed is None and registered is None
    assert decide(policies, ALICE, Ask(model_sources=("hf://meta-llamas/evil",)), {}) == (
        "Refused by policy organization/acme: model hf://meta-llamas/evil starts with none of its model sources "
        "(hf://meta-llama/, model://approved-).")
    assert decide(policies, ALICE, Ask(), {}) is None  # no model (a gateway): the list does not apply


def test_outside_the_deploy_hours_a_deploy_is_refused_and_a_scale_is_not() -> None:
    policies = [policy("group", "infra", deploy_hours="22:00-06:00")]
    assert decide(policies, ALICE, Ask(at=at(23, 15)), {}) is None
    assert decide(policies, ALICE, Ask(at=at(14, 5)), {}) == (
        "Refused by policy group/infra: deploys are allowed 22:00-06:00 UTC only; it is 14:05 UTC now.")
    assert decide(policies, ALICE, Ask(gpus=1, copies=1), {}) is None  # no `at`: not a deploy


def test_a_quota_refuses_the_copy_that_would_exceed_it_with_the_figures() -> None:
    policies = [policy("group", "ml-team", max_gpus=8)]
    usage = {"group/ml-team": Usage(gpus=6, copies=3)}
    assert decide(policies, ALICE, Ask(gpus=2, copies=1), usage) is None  # exactly the quota
    assert decide(policies, ALICE, Ask(gpus=4, copies=1), usage) == (
        "Refused by policy group/ml-team: max_gpus 8, 6 in use, this needs 4 more.")
    copies = [policy("user", "alice", max_copies=2)]
    assert decide(copies, ALICE, Ask(gpus=1, copies=1), {"user/alice": Usage(gpus=2, copies=2)}) == (
        "Refused by policy user/alice: max_copies 2, 2 in use, this needs 1 more.")
    assert decide(copies, ALICE, Ask(), {"user/alice": Usage(gpus=9, copies=9)}) is None  # asks nothing more


def test_of_several_policies_the_strictest_wins() -> None:
    policies = [policy("organization", "acme", max_gpus=100, entries=["A", "B"]),
                policy("group", "ml-team", max_gpus=8), policy("user", "alice", max_gpus=16, entries=["A"])]
    usage = {"organization/acme": Usage(gpus=95), "group/ml-team": Usage(gpus=6), "user/alice": Usage(gpus=6)}
    # Three quotas refuse 4 GPUs more; the group's has the least room left (2), so it is the one named.
    assert decide(policies, ALICE, Ask(gpus=4, copies=1), usage) == (
        "Refused by policy group/ml-team: max_gpus 8, 6 in use, this needs 4 more.")
    # Every allow-list must allow: the user's narrower one refuses B even though the organization's allows it.
    assert decide(policies, ALICE, Ask(entry="B"), {}) == (
        "Refused by policy user/alice: it allows the entries A, not 'B'.")
    # An allow-list refusal comes before any quota's.
    assert decide(policies, ALICE, Ask(entry="C", gpus=400, copies=1), usage).startswith(  # type: ignore[union-attr]
        "Refused by policy user/alice: it allows the entries A")


def test_usage_is_counted_per_user_per_group_and_per_organization() -> None:
    policies = [policy("user", "alice"), policy("group", "ml-team"), policy("organization", "acme")]
    held = [HeldCopy("wf-a", "alice", "acme", ("ml-team",), 2), HeldCopy("wf-a", "alice", "acme", ("ml-team",), 2),
            HeldCopy("wf-b", "bob", "acme", ("ml-team",), 4), HeldCopy("wf-c", "carol", "acme", (), 1),
            HeldCopy("wf-d", "dave", "globex", ("ml-team",), 8)]
    usage = tally(policies, held)
    assert usage["user/alice"] == Usage(gpus=4, copies=2)
    assert usage["group/ml-team"] == Usage(gpus=16, copies=4)  # a group's name binds its members whoever they are
    assert usage["organization/acme"] == Usage(gpus=9, copies=4)
    assert tally(policies, held, except_workflow="wf-a")["user/alice"] == Usage()


def test_copies_allowed_says_how_far_a_pool_may_grow_and_why_not_further() -> None:
    policies = [policy("group", "ml-team", max_gpus=8)]
    usage = {"group/ml-team": Usage(gpus=4, copies=2)}
    assert copies_allowed(policies, ALICE, 2, usage, 2) == (2, None)
    assert copies_allowed(policies, ALICE, 2, usage, 3) == (
        2, "Refused by policy group/ml-team: max_gpus 8, 4 in use, this needs 6 more.")
    assert copies_allowed(policies, ALICE, 8, usage, 1) == (
        0, "Refused by policy group/ml-team: max_gpus 8, 4 in use, this needs 8 more.")
    assert copies_allowed(policies, ALICE, 8, usage, 0) == (0, None)
