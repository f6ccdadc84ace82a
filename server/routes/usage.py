"""Usage routes (docs/usage.md): GPU-seconds reserved and ready, requests and tokens by user, group, organization,
workflow or endpoint and by period — a caller's own usage; an administrator's, everyone's with the budgets — and the
budgets per organization or group that administrators set."""

from __future__ import annotations

import re
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from berth.contracts.audit import MAX_UNIX_TIME
from berth.contracts.base import NAME_PATTERN
from berth.contracts.usage import BudgetStatus, UsageBudget, UsageBy, UsagePeriod, UsageReport
from berth.errors import NotFoundError, UserInputError
from server import usage_report
from server.context import Context, ServerContext
from server.guards import Admin, Caller
from server.usage_report import UsageAsk

router = APIRouter()
NAME = re.compile(NAME_PATTERN)
Time = Annotated[float | None, Query(ge=0, le=MAX_UNIX_TIME, allow_inf_nan=False)]


@router.get("/v1/usage")
async def usage(context: Context, who: Caller, by: UsageBy = UsageBy.USER, since: Time = None, until: Time = None,
                period: UsagePeriod | None = None) -> UsageReport:
    """Usage in [since, until) (default: this UTC month so far) by key and period: the caller's own; an
    administrator's, everyone's, with every budget's use in its current period."""
    ask = UsageAsk(by=by, since=since, until=until, period=period)
    return await run_in_threadpool(usage_report.report, context.store, who, ask, time.time())


@router.get("/v1/usage/budgets")
async def budgets(context: Context, _who: Admin) -> list[BudgetStatus]:
    """Every budget against its use in its current period (administrators)."""
    return await run_in_threadpool(usage_report.check_budgets, context.store, time.time())


@router.put("/v1/usage/budgets")
async def set_budget(budget: UsageBudget, context: Context, who: Admin) -> UsageBudget:
    """Set or replace the token and/or GPU-hour budget of an organization or group for a day or month (UTC)."""
    if budget.tokens is None and budget.gpu_hours is None:
        raise UserInputError("A budget needs tokens, GPU-hours or both (`--tokens N`, `--gpu-hours H`).")
    if not NAME.fullmatch(budget.name):
        raise UserInputError("A budget's name must be an organization or group name: letters, digits, '.', '_' "
                             "or '-' (at most 128).")
    await run_in_threadpool(_known, context, budget.scope, budget.name)
    await run_in_threadpool(context.store.budgets.set, budget, who.user, time.time())
    return budget


@router.delete("/v1/usage/budgets/{scope}/{name}/{period}", status_code=204)
async def remove_budget(scope: Literal["org", "group"], name: str, period: Literal["day", "month"], context: Context,
                        _who: Admin) -> None:
    await run_in_threadpool(context.store.budgets.remove, scope, name, period)


def _known(context: ServerContext, scope: str, name: str) -> None:
    """A budget names an organization or group the store knows: a typo is refused, not budgeted forever."""
    if not context.store.budgets.known(scope, name):
        kind = "group" if scope == "group" else "organization"
        raise NotFoundError(f"No {kind} named '{name}'. `berth user list` shows the users' groups and organizations.")
