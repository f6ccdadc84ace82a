"""The REST client's policy methods (berth/api_client.py's ApiClient has them): a module of its own, importing only
its routes' contracts, so that `berth policy` does not import every contract (issue 33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, body, many, one, segment

if TYPE_CHECKING:
    from berth.contracts.policies import (
        Policy,
        PolicyKind,
        PolicyRemoved,
        PolicyRules,
        ScaleAllowance,
    )


class PoliciesApi(ApiTransport):
    async def policies(self) -> list[Policy]:
        """Every policy (an administrator), or those that bind the caller."""
        return many(contracts.Policy, await self.request("GET", "/v1/policies"))

    async def policy(self, kind: PolicyKind, name: str) -> Policy:
        return one(contracts.Policy, await self.request("GET", f"/v1/policies/{kind}/{segment(name)}"))

    async def set_policy(self, kind: PolicyKind, name: str, rules: PolicyRules) -> Policy:
        """Set (replace) a policy: what `rules` leaves out allows anything (administrators only)."""
        data = await self.request("PUT", f"/v1/policies/{kind}/{segment(name)}", json=body(rules))
        return one(contracts.Policy, data)

    async def remove_policy(self, kind: PolicyKind, name: str) -> PolicyRemoved:
        return one(contracts.PolicyRemoved, await self.request("DELETE", f"/v1/policies/{kind}/{segment(name)}"))

    async def scale_allowance(self, workflow_id: str, current: int, wanted: int) -> ScaleAllowance:
        """How far the quotas let a pool grow now (the autoscaler asks before a scale-out)."""
        request = contracts.ScaleAllowanceRequest(current=current, wanted=wanted)
        return one(contracts.ScaleAllowance, await self.request(
            "POST", f"/v1/internal/workflows/{segment(workflow_id)}/scale-allowance", json=body(request)))
