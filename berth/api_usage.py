"""The REST client's usage methods (berth/api_client.py's ApiClient has them): a module of its own, importing only its
routes' contracts, so that `berth usage` does not import every contract (issue 33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, many, one, segment
from berth.contracts.usage import UsageBy  # named at definition time

if TYPE_CHECKING:
    from berth.contracts.usage import BudgetStatus, UsageBudget, UsagePeriod, UsageReport


class UsageApi(ApiTransport):
    async def usage(self, by: UsageBy = UsageBy.USER, since: float | None = None, until: float | None = None,
                    period: UsagePeriod | None = None) -> UsageReport:
        """GPU-seconds, requests and tokens by key and period: the caller's own (an administrator's: everyone's)."""
        params: dict[str, str | float] = {"by": by.value}
        for name, value in (("since", since), ("until", until)):
            if value is not None:
                params[name] = value
        if period is not None:
            params["period"] = period.value
        return one(contracts.UsageReport, await self.request("GET", "/v1/usage", params=params))

    async def usage_budgets(self) -> list[BudgetStatus]:
        """Every budget against its use in its current period (administrators)."""
        return many(contracts.BudgetStatus, await self.request("GET", "/v1/usage/budgets"))

    async def set_usage_budget(self, budget: UsageBudget) -> UsageBudget:
        data = await self.request("PUT", "/v1/usage/budgets", json=budget.model_dump(mode="json"))
        return one(contracts.UsageBudget, data)

    async def remove_usage_budget(self, scope: str, name: str, period: str) -> None:
        await self.request("DELETE", f"/v1/usage/budgets/{segment(scope)}/{segment(name)}/{segment(period)}")
