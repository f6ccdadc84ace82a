"""Usage reports and budget checks over the store (server/store/usage.py, server/store/usage_budgets.py): the
window a query names by default, what a caller may see (their own usage; an administrator everyone's and the
budgets), and the one place a budget found exceeded is announced (`budget_exceeded`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from berth.contracts.events import EventKind
from berth.contracts.usage import BudgetStatus, UsageBudget, UsageBy, UsagePeriod, UsageReport
from berth.security import Identity
from server.context import ServerContext
from server.events import Audience, EventDraft, record
from server.store.database import Store
from server.store.tables import GroupRow
from server.store.usage import UsageQuery
from server.usage_periods import Span, current

log = logging.getLogger(__name__)
BUDGET_CHECK_EVERY_S = 60.0  # how often the autoscaler's tick also checks the budgets (server/routes/internal.py)
NOTES = {
    UsageBy.USER: "GPUs by workflow owner; requests by the caller the endpoint proxy named.",
    UsageBy.GROUP: "By each group the user is in now: a user in two groups counts in both rows (once in the "
                   "total); a user in no group is in no row.",
    UsageBy.ORG: "GPUs by the owner's organization when the copy was placed; requests by the caller's "
                 "organization now.",
    UsageBy.WORKFLOW: "GPUs by workflow; requests by the workflow whose endpoint was called.",
    UsageBy.ENDPOINT: "GPUs by the workflow's endpoint; requests by the endpoint called.",
}
NO_ONE = ' Usage attributed to no one (a caller the proxy did not name) has the key "".'


@dataclass(frozen=True)
class UsageAsk:
    by: UsageBy = UsageBy.USER
    since: float | None = None  # None: the start of the current UTC month
    until: float | None = None  # None: now
    period: UsagePeriod | None = None


def report(store: Store, who: Identity, ask: UsageAsk, now: float) -> UsageReport:
    """Blocking. The caller's own usage (an administrator: everyone's, and every budget, checked)."""
    until = now if ask.until is None else ask.until
    since = current(until, UsagePeriod.MONTH).start if ask.since is None else ask.since
    query = UsageQuery(by=ask.by, window=Span(since, until), period=ask.period,
                       user=None if who.admin else who.user)
    rows, total = store.usage.report(query, now)
    budgets = check_budgets(store, now) if who.admin else []
    return UsageReport(by=ask.by, period=ask.period, since=since, until=until, rows=rows, total=total,
                       budgets=budgets, note=NOTES[ask.by] + NO_ONE)


def check_budgets(store: Store, now: float) -> list[BudgetStatus]:
    """Blocking. Every budget against its current period; each newly exceeded figure announced once."""
    statuses = store.budgets.statuses(now)
    for status in statuses:
        for figure in status.exceeded:
            if store.budgets.first_exceeded(status, figure, now):
                budget_exceeded(store, status, figure)
    return statuses


async def check_budgets_on_tick(context: ServerContext) -> None:
    """The budgets checked at most every BUDGET_CHECK_EVERY_S by this API process. A store error is logged, not
    raised: the autoscaler's tick must not fail for usage's sake."""
    now = time.time()
    if now - context.budgets_checked_at < BUDGET_CHECK_EVERY_S:
        return
    context.budgets_checked_at = now
    try:
        await run_in_threadpool(check_budgets, context.store, now)
    except SQLAlchemyError as error:
        log.warning("could not check the usage budgets: %s", type(error).__name__)


def budget_exceeded(store: Store, status: BudgetStatus, figure: str) -> None:
    """THE "budget exceeded" event: called once per budget, period and figure (tokens or gpu_hours), whichever API
    process saw it first; recorded in the cluster's event stream (the budget's organization or group, and
    administrators, see it) and the log. Blocking (it is called from check_budgets, in the thread pool)."""
    budget = status.budget
    used, allowed = ((status.tokens_used, budget.tokens) if figure == "tokens"
                     else (round(float(status.gpu_hours_used), 3), budget.gpu_hours))
    unit = "tokens" if figure == "tokens" else "GPU-hours"
    line = (f"usage budget exceeded: {budget.scope} {budget.name}, {used} {unit} used of {allowed} this "
            f"{budget.period}")
    log.warning("%s (from %s)", line, status.period_start)
    record(store, EventDraft(kind=EventKind.BUDGET_EXCEEDED, message=line, audience=_budget_audience(store, budget),
                             details={"figure": figure, "period": budget.period}))


def _budget_audience(store: Store, budget: UsageBudget) -> Audience:
    """Who reads a budget's event: its organization, or its group (in the group's organization)."""
    if budget.scope != "group":
        return Audience.of_org(budget.name)
    with store.session() as s:
        group = s.get(GroupRow, budget.name)
    return Audience.of_group(group.org, budget.name) if group is not None else Audience()
