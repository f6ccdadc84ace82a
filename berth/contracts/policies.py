"""Policy contracts (`/v1/policies`, docs/policies.md): what a user, group or organization may deploy — allow-lists
of catalog entries and of model sources, deploy hours in UTC — and the GPUs and copies its workflows may hold at once
(`max_gpus`, `max_copies`). The decisions are server/policy_rules.py's; these are the shapes both sides share."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from berth.contracts.base import NAME_PATTERN, Payload, Response

# Whom a policy binds: one user, every member of a group, everyone of an organization.
PolicyKind = Literal["user", "group", "organization"]
POLICY_KINDS: tuple[PolicyKind, ...] = ("user", "group", "organization")

# "HH[:MM]-HH[:MM]" in UTC: 08-18, 22:30-06:00 (a start after the end wraps past midnight); 24 only as "24" or "24:00".
DEPLOY_HOURS_PATTERN = r"^([01]?[0-9]|2[0-4])(:[0-5][0-9])?-([01]?[0-9]|2[0-4])(:[0-5][0-9])?$"
_HOURS = re.compile(DEPLOY_HOURS_PATTERN)
MAX_LISTED = 64  # entries or model sources one policy lists: a policy is read on every placement

EntryName = Annotated[str, Field(min_length=1, max_length=128)]
SourcePrefix = Annotated[str, Field(min_length=1, max_length=300, pattern=r"^[^\s]+$")]


def _minutes(part: str) -> int:
    hours, _, minutes = part.partition(":")
    total = int(hours) * 60 + int(minutes or 0)
    if total > 24 * 60:
        raise ValueError(f"'{part}' is past 24:00")
    return total


def deploy_window(text: str) -> tuple[int, int]:
    """(start, end) in minutes after midnight UTC of a valid `deploy_hours`; ValueError in one line otherwise."""
    if not _HOURS.fullmatch(text):
        raise ValueError("deploy_hours must read START-END in UTC hours, like 08-18 or 22:30-06:00")
    start, end = (_minutes(part) for part in text.split("-"))
    if start == end:
        raise ValueError("deploy_hours starts where it ends: leave it out to allow deploys at any hour")
    if start == 24 * 60:
        raise ValueError("deploy_hours must start before 24:00 (00:00 is midnight)")
    return start, end


class PolicyRules(Payload):
    """What a policy sets (`PUT /v1/policies/{kind}/{name}`): each rule left out (null) allows anything. An empty
    list allows nothing of its kind. An unknown field is refused: a misspelt `max_gpu` must not pass as no quota."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    entries: list[EntryName] | None = Field(None, max_length=MAX_LISTED)  # catalog entry names, exactly
    # Prefixes a model's source must start with: hf://meta-llama/ (a registered model: its model://NAME or source).
    model_sources: list[SourcePrefix] | None = Field(None, max_length=MAX_LISTED)
    deploy_hours: str | None = Field(None, max_length=11, json_schema_extra={"pattern": DEPLOY_HOURS_PATTERN})
    max_gpus: int | None = Field(None, ge=0, le=1_000_000)  # GPUs its workflows' placed copies hold at once
    max_copies: int | None = Field(None, ge=0, le=1_000_000)  # copies its workflows hold placed at once

    @field_validator("deploy_hours")
    @classmethod
    def _hours(cls, value: str | None) -> str | None:
        if value is not None:
            deploy_window(value)
        return value


class PolicyUsage(Response):
    """What the workflows a policy counts hold now (docs/policies.md says which workflows each kind counts)."""

    gpus: int = Field(ge=0)
    copies: int = Field(ge=0)


class Policy(Response):
    """One stored policy, and (in the routes' answers) what it counts in use now."""

    kind: PolicyKind
    name: str = Field(json_schema_extra={"pattern": NAME_PATTERN})
    rules: PolicyRules
    set_by: str
    set_at: float
    in_use: PolicyUsage | None = None  # None where only the rules were read (the decisions')


class PolicyRemoved(Response):
    kind: PolicyKind
    name: str
    removed: bool


class ScaleAllowanceRequest(Payload):
    """The autoscaler asks before a scale-out (`POST /v1/internal/workflows/{id}/scale-allowance`)."""

    current: int = Field(ge=0, le=1_000_000)  # the pool's desired size now
    wanted: int = Field(ge=0, le=1_000_000)  # the size it decided on


class ScaleAllowance(Response):
    """The largest size up to `wanted` the quotas allow now, and the line refusing the first copy beyond it."""

    allowed: int = Field(ge=0)
    refusal: str | None = None
