"""Usage and chargeback contracts (`GET /v1/usage`, the budget routes): GPU-seconds reserved and ready, requests and
tokens per user, group, organization, workflow or endpoint and per period; token and GPU-hour budgets per
organization or group. docs/usage.md says where each figure comes from."""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from berth.contracts.base import INT64_MAX, NAME_PATTERN, Number, Payload, Response

_NAME: JsonDict = {"pattern": NAME_PATTERN}  # checked by server/routes/usage.py too: 400 in one line


class UsageBy(str, Enum):
    """What usage is summed by."""

    USER = "user"  # a workflow's owner (GPUs); the caller the endpoint proxy named (requests)
    GROUP = "group"  # each group that user is in now: a user in two groups counts in both
    ORG = "org"  # that user's organization (GPUs: the owner's when the copy was placed)
    WORKFLOW = "workflow"
    ENDPOINT = "endpoint"


class UsagePeriod(str, Enum):
    """A UTC calendar period usage is split by."""

    HOUR = "hour"
    DAY = "day"
    MONTH = "month"


BudgetScope = Literal["org", "group"]
BudgetPeriod = Literal["day", "month"]
BudgetFigure = Literal["tokens", "gpu_hours"]


class UsageFigures(Response):
    """What was used: GPU-seconds (GPUs × seconds) a copy held its placement and was ready, and the requests the
    endpoint proxies audited with their tokens."""

    gpu_seconds_reserved: Number = Field(ge=0)  # from a copy's reservation to its release
    gpu_seconds_ready: Number = Field(ge=0)  # from its first readiness to its release
    requests: int = Field(ge=0)  # requests the proxies admitted (audit ATTEMPT records)
    successes: int = Field(ge=0)  # answered below 400
    failures: int = Field(ge=0)  # failed or answered 400 and above
    tokens_in: int = Field(ge=0)
    tokens_out: int = Field(ge=0)


class UsageRow(UsageFigures):
    """One key's figures in one period (the whole window when no period was asked)."""

    key: str  # the user, group, organization, workflow or endpoint; "" for usage attributed to no one
    period_start: Number
    period_end: Number


class UsageBudget(Payload):
    """A budget per organization or group and UTC day or month: tokens (in + out) and/or GPU-hours reserved — at
    least one of them, as the schema states (the route refuses neither in one line)."""

    model_config = ConfigDict(frozen=True, json_schema_extra={"anyOf": [
        {"required": ["tokens"], "properties": {"tokens": {"type": "integer"}}},
        {"required": ["gpu_hours"], "properties": {"gpu_hours": {"type": "number"}}}]})

    scope: BudgetScope
    name: str = Field(json_schema_extra=_NAME)
    period: BudgetPeriod = "month"
    tokens: int | None = Field(None, ge=1, le=INT64_MAX)
    gpu_hours: float | None = Field(None, gt=0, le=1e12)


class BudgetStatus(Response):
    """A budget against what its organization or group used in its current period."""

    budget: UsageBudget
    period_start: Number
    period_end: Number
    tokens_used: int = Field(ge=0)
    gpu_hours_used: Number = Field(ge=0)
    exceeded: list[BudgetFigure]  # the figures past their budget (empty: within it)


class UsageReport(Response):
    """`GET /v1/usage`: the rows by key and period, their total, and the budgets the caller may see."""

    by: UsageBy
    period: UsagePeriod | None
    since: Number
    until: Number
    rows: list[UsageRow]
    total: UsageFigures  # each figure once (by group, a user in two groups counts once here)
    budgets: list[BudgetStatus]  # administrators only
    note: str  # how the rows were attributed (by group: each of the user's groups)


class UsageBudgets(Response):
    budgets: list[UsageBudget]
