"""site_local (issue 36): keep an endpoint's requests in its preferred site, spilling to its failover sites only
while the preferred site is saturated, and never to a copy outside its residency or allowed sites.

Each copy's `site_rank` comes with the routing table (berth/sites.py `route_rank`, applied by the control plane to
the copy's node's site and the pool's PreferredSite, FailoverSites, AllowedSites and Residency): 0 preferred, 1
failover, None never. `routing.choose` asks `within` before anything else — sessions and prompt keys included — so
a copy ranked None is never chosen. The candidates are those `routing.choose` gives: ready, undrained, scraped
within 30 s with no failure since; a preferred copy whose figures are stale or failed is not there at all, so it
is never weighed as idle, and with none left the failover sites serve."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.edge.policy_kit import SPILL_MARGIN, Rotation, tied
from gateway.edge.replica import Replica


def saturated(preferred: Sequence[Replica], failover: Sequence[Replica], margin: float = SPILL_MARGIN) -> bool:
    """The preferred site's shortest queue is more than `margin` (policy_kit.SPILL_MARGIN) above the failover
    sites' shortest: a request would wait that much longer at home. Against the failover copies, not the mean of
    all: with ten preferred copies and one failover copy, the mean barely moves off the preferred site's own."""
    return bool(preferred) and bool(failover) and \
        min(r.queue for r in preferred) > min(r.queue for r in failover) + margin


class SiteLocal:
    """The preferred site's copies, shortest queue first (equal ones in turn); while the preferred site is
    saturated, or has no eligible copy, its failover sites' copies join them."""

    name = "site_local"
    reads_prompt = False

    def __init__(self) -> None:
        self._rotation = Rotation()

    @staticmethod
    def within(candidates: Sequence[Replica]) -> list[Replica]:
        """The candidates this endpoint may ever send to: its preferred and failover sites'."""
        return [replica for replica in candidates if replica.site_rank is not None]

    def serving(self, candidates: Sequence[Replica]) -> list[Replica]:
        """The copies that take the next request: the preferred site's, with its failover sites' when it is
        saturated or has none (never empty for candidates `within` kept)."""
        candidates = self.within(candidates)
        preferred = [replica for replica in candidates if replica.site_rank == 0]
        failover = [replica for replica in candidates if replica.site_rank == 1]
        if preferred and not saturated(preferred, failover):
            return preferred
        return candidates

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        return min(self._rotation.rotated(self.serving(candidates)), key=lambda replica: replica.queue)

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return tied(self.serving(candidates), lambda replica: replica.queue)
