"""Usage budgets in the store: an administrator's token and GPU-hour budgets per organization or group and UTC day
or month; each one's use in its current period (server/store/usage.py sums it); and the alerts that make a budget's
"exceeded" event be raised once per period and figure, whichever API process sees it first."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from berth.contracts.usage import BudgetFigure, BudgetStatus, UsageBudget, UsageBy, UsagePeriod
from berth.errors import NotFoundError
from server.store.tables import GroupRow, UsageAlertRow, UsageBudgetRow, UserRow
from server.store.usage import UsageQuery, UsageStore
from server.usage_periods import current

SCOPE_BY = {"org": UsageBy.ORG, "group": UsageBy.GROUP}
MAX_BUDGETS = 1_000  # a listing's bound; an administrator sets them one at a time


class UsageBudgets:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]], usage: UsageStore) -> None:
        self._session = session
        self._usage = usage

    def set(self, budget: UsageBudget, by: str, now: float) -> None:
        """Set (or replace) the budget of one organization or group and period."""
        with self._session() as s:
            row = s.get(UsageBudgetRow, (budget.scope, budget.name, budget.period))
            if row is None:
                row = UsageBudgetRow(scope=budget.scope, name=budget.name, period=budget.period)
                s.add(row)
            row.tokens, row.gpu_hours, row.set_by, row.set_at = budget.tokens, budget.gpu_hours, by, now

    def known(self, scope: str, name: str) -> bool:
        """Whether the store knows the organization (a user's or a group's) or group a budget names."""
        with self._session() as s:
            if scope == "group":
                return s.get(GroupRow, name) is not None
            return s.scalars(select(UserRow.name).where(UserRow.org == name).limit(1)).first() is not None or \
                s.scalars(select(GroupRow.name).where(GroupRow.org == name).limit(1)).first() is not None

    def remove(self, scope: str, name: str, period: str) -> None:
        with self._session() as s:
            removed = s.execute(delete(UsageBudgetRow).where(
                UsageBudgetRow.scope == scope, UsageBudgetRow.name == name, UsageBudgetRow.period == period))
        if not getattr(removed, "rowcount", 0):
            raise NotFoundError(f"No {period} budget for {scope} '{name}'. `berth usage budget list` lists them.")

    def budgets(self) -> list[UsageBudget]:
        with self._session() as s:
            rows = s.scalars(select(UsageBudgetRow).order_by(UsageBudgetRow.scope, UsageBudgetRow.name,
                                                             UsageBudgetRow.period).limit(MAX_BUDGETS)).all()
        return [UsageBudget.model_validate({"scope": r.scope, "name": r.name, "period": r.period,
                                            "tokens": r.tokens, "gpu_hours": r.gpu_hours}) for r in rows]

    def statuses(self, now: float) -> list[BudgetStatus]:
        """Every budget against its use in the period `now` falls in: one usage query per scope and period."""
        budgets = self.budgets()
        used: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
        for scope, period in sorted({(b.scope, b.period) for b in budgets}):
            window = current(now, UsagePeriod(period))
            rows = self._usage.rows(UsageQuery(by=SCOPE_BY[scope], window=window), now)
            used[(scope, period)] = {r.key: (r.tokens_in + r.tokens_out, r.gpu_seconds_reserved / 3600) for r in rows}
        return [_status(b, current(now, UsagePeriod(b.period)), used[(b.scope, b.period)].get(b.name, (0, 0.0)))
                for b in budgets]

    def first_exceeded(self, status: BudgetStatus, figure: BudgetFigure, now: float) -> bool:
        """Record that the budget was seen exceeded on `figure` in its period: True the first time only."""
        budget = status.budget
        key = (budget.scope, budget.name, budget.period, float(status.period_start), figure)
        try:
            with self._session() as s:
                if s.get(UsageAlertRow, key) is not None:
                    return False
                s.add(UsageAlertRow(scope=key[0], name=key[1], period=key[2], period_start=key[3], figure=figure,
                                    at=now))
        except IntegrityError:  # another API process recorded it between the read and the write
            return False
        return True


def _status(budget: UsageBudget, period: tuple[float, float], used: tuple[int, float]) -> BudgetStatus:
    tokens, gpu_hours = used
    exceeded: list[BudgetFigure] = []
    if budget.tokens is not None and tokens > budget.tokens:
        exceeded.append("tokens")
    if budget.gpu_hours is not None and gpu_hours > budget.gpu_hours:
        exceeded.append("gpu_hours")
    return BudgetStatus(budget=budget, period_start=period[0], period_end=period[1], tokens_used=tokens,
                        gpu_hours_used=gpu_hours, exceeded=exceeded)
