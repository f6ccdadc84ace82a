"""What every routing policy is (the Policy protocol) and the rankings several share: ties, a rotating start, and
when a copy counts as overloaded. The policies live in gateway/edge/routing.py, capacity_policies.py and
prefix_affinity.py; gateway/edge/routing.py registers them by name."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gateway.edge.replica import Replica

# A copy whose queue (running + waiting + this router's in flight) is more than this above the mean of the copies
# to choose from is overloaded: a preference (a prefix's copy, a cheap node) gives way to the load. Additive, not a
# ratio of the mean: the preferred copy's own queue is in the mean, and with two copies a ratio never trips.
SPILL_MARGIN = 4.0


class Policy(Protocol):
    name: str
    reads_prompt: bool  # whether the router should hand it the prompt's block hashes (prefix_affinity)

    def choose(self, candidates: Sequence[Replica]) -> Replica: ...

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        """The candidates this policy finds equally good (a PromptKey picks among them)."""
        ...


def tied(candidates: Sequence[Replica], rank: Callable[[Replica], Any]) -> list[Replica]:
    lowest = min(rank(r) for r in candidates)
    return [r for r in candidates if rank(r) == lowest]


class Rotation:
    """A start that moves by one at each request, so that copies ranked equal share the load instead of the first
    one taking every request."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def rotated(self, candidates: Sequence[Replica]) -> list[Replica]:
        offset = next(self._counter) % len(candidates)
        return list(candidates[offset:]) + list(candidates[:offset])


def overloaded(replica: Replica, candidates: Sequence[Replica], margin: float = SPILL_MARGIN) -> bool:
    """Its queue is more than `margin` above the candidates' mean queue."""
    mean = sum(r.queue for r in candidates) / len(candidates)
    return replica.queue > mean + margin


def within_load(candidates: Sequence[Replica], margin: float = SPILL_MARGIN) -> list[Replica]:
    """The candidates that are not overloaded (never empty: the shortest queue is at or below the mean)."""
    return [r for r in candidates if not overloaded(r, candidates, margin)]


class Ranked:
    """A policy that ranks the candidates by a key made from them all (the lowest goes first): `rank` is its own."""

    name = ""
    reads_prompt = False

    def rank(self, candidates: Sequence[Replica]) -> Callable[[Replica], Any]:
        raise NotImplementedError

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        return min(candidates, key=self.rank(candidates))

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return tied(candidates, self.rank(candidates))
