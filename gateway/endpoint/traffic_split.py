"""A rollout's traffic split in the endpoint proxy: which revision a request goes to (smooth weighted round
robin, as nginx does it), before the route's policy picks among that revision's copies."""

from __future__ import annotations

from collections.abc import Sequence

from berth.routing_rules import revision_weighted
from gateway.edge.routing import FRESH_FOR_S, Replica, eligible


class TrafficSplit:
    """Revision → percent, picked in a deterministic interleaved order: over any 100 picks each revision
    gets its share, spread out rather than in bursts (nginx's smooth weighted round robin). Its state lives
    across routing-table refreshes while the weights are unchanged."""

    def __init__(self, weights: dict[int, int]) -> None:
        self.weights = dict(weights)
        self._current: dict[int, int] = {revision: 0 for revision in self.weights}

    def pick(self, revisions: set[int]) -> int | None:
        """The next revision among those offered that has a weight above 0; None: none of them has."""
        offered = [r for r in self.weights if r in revisions and revision_weighted(self.weights, r)]
        if not offered:
            return None
        total = 0
        for revision in offered:
            self._current[revision] += self.weights[revision]
            total += self.weights[revision]
        chosen = max(offered, key=lambda r: (self._current[r], -r))
        self._current[chosen] -= total
        return chosen

    def candidates(self, pool: Sequence[Replica], now: float, exclude: frozenset[str] = frozenset(),
                   fresh_for_s: float = FRESH_FOR_S) -> list[Replica]:
        """The copies of the revision this request goes to; all the pool when no weighted revision has an
        eligible copy (a split narrows routing, it never fails a request)."""
        ready = {r.revision for r in eligible(pool, now, fresh_for_s) if r.copy_id not in exclude}
        revision = self.pick(ready)
        if revision is None:
            return list(pool)
        return [r for r in pool if r.revision == revision]


def refreshed(old: TrafficSplit | None, weights: dict[int, int] | None) -> TrafficSplit | None:
    """The split for a refreshed route: the same object (its interleaving state) while the weights hold."""
    if not weights:
        return None
    if old is not None and old.weights == weights:
        return old
    return TrafficSplit(weights)
