"""Autoscaler: size each replica pool from its request rate, and scale an idle MinReplicas=0 pool to
zero; decisions go to the workflow's `scale` update with their reason.

Rate sources (`RateSource`): a Proxy=true pool is sized by the rate its LiteLLM proxy measures (the sync
hook posts its counters, `LiteLLMRates`); the endpoint proxy counts the requests it admits per endpoint
(`FrontDoorRates`), which sizes nothing for Proxy=false pools (as documented). Idleness is judged on
every path that reaches a copy (`CountingCopies`): the copies' own counters see the discovering gateway's
requests too, which go straight to a Proxy=false pool's copies and pass neither proxy.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from berth.contracts import PoolFacts
from server.store.load_reports import RATE_WINDOW_S


@dataclass(frozen=True)
class Load:
    rate_rps: float  # requests per second over the window
    idle_s: float  # seconds since the last request (or since the source first saw the endpoint)


class RateSource(Protocol):
    def load(self, endpoint_id: str, now: float) -> Load: ...


class FrontDoorRates:
    """Request counts reported by the endpoint proxy, kept in memory for the window."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._counts: dict[str, deque[tuple[float, int]]] = {}
        self._last_request: dict[str, float] = {}

    def add(self, endpoint_id: str, requests: int, now: float) -> None:
        if requests <= 0:
            return
        counts = self._counts.setdefault(endpoint_id, deque())
        counts.append((now, requests))
        self._last_request[endpoint_id] = now
        while counts and counts[0][0] < now - self.window_s:
            counts.popleft()

    def load(self, endpoint_id: str, now: float) -> Load:
        counts = self._counts.get(endpoint_id, deque())
        total = sum(n for at, n in counts if at >= now - self.window_s)
        # An endpoint never seen before starts its idle clock now (not at the server's start).
        last = self._last_request.setdefault(endpoint_id, now)
        return Load(rate_rps=total / self.window_s, idle_s=max(0.0, now - last))


class LiteLLMRates(FrontDoorRates):
    """Requests counted inside a Proxy=true pool's LiteLLM proxy: its sync hook posts each worker's
    running totals; the difference between two posts of one worker is what it admitted meanwhile."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        super().__init__(window_s)
        self._totals: dict[tuple[str, int, float], int] = {}  # (endpoint, worker pid, worker start)
        self.created_at = time.time()
        # The copies LiteLLM routes to, as its last post said: the endpoint proxy sends a request held
        # for a woken pool on as soon as LiteLLM knows a copy (not after a guessed delay).
        self.routed: dict[str, tuple[str, ...]] = {}

    def add_snapshot(self, endpoint_id: str, pid: int, started_at: float, requests_total: int, now: float,
                     replicas: tuple[str, ...] = ()) -> None:
        self.routed[endpoint_id] = tuple(sorted(replicas))
        key = (endpoint_id, pid, started_at)
        # A worker first heard from: if it started after us, all it counted is new; if it predates us
        # (the API server restarted), its lifetime total is only a baseline, or a busy pool's history
        # would read as one burst and scale it to MaxReplicas.
        previous = self._totals.get(key, 0 if started_at >= self.created_at else requests_total)
        self._totals[key] = requests_total
        self.add(endpoint_id, max(0, requests_total - previous), now)


class ProxiedRates:
    """A Proxy=true pool's load: the rate LiteLLM measured; idle only when neither LiteLLM nor the
    endpoint proxy (which holds and wakes requests while no copy is up) saw a request."""

    def __init__(self, litellm: LiteLLMRates, front_door: FrontDoorRates) -> None:
        self.litellm, self.front_door = litellm, front_door

    def load(self, endpoint_id: str, now: float) -> Load:
        inside, outside = self.litellm.load(endpoint_id, now), self.front_door.load(endpoint_id, now)
        return Load(rate_rps=inside.rate_rps, idle_s=min(inside.idle_s, outside.idle_s))


class CopyIdleness(Protocol):
    def idle_s(self, endpoint_id: str, now: float) -> float: ...


class CountingCopies:
    """A source's rate, with idleness also cut short by work its copies report doing (control/copy_activity.py):
    a pool is idle only when no path to it (endpoint proxy, LiteLLM, gateway) carried a request."""

    def __init__(self, source: RateSource, copies: CopyIdleness) -> None:
        self.source, self.copies = source, copies

    def load(self, endpoint_id: str, now: float) -> Load:
        seen = self.source.load(endpoint_id, now)
        return Load(rate_rps=seen.rate_rps, idle_s=min(seen.idle_s, self.copies.idle_s(endpoint_id, now)))


@dataclass(frozen=True)
class PoolPolicy:
    """A pool's sizing settings (from its definition, kept in the endpoint's annotations)."""

    min_replicas: int
    max_replicas: int
    target_requests_per_s: float = 0.0  # 0: no rate autoscaling
    scale_down_delay_s: float = 60.0
    scale_to_zero_after_s: float = 300.0
    rate_autoscaling: bool = True  # False for Proxy=false pools (as documented): only idle → zero
    # Queue/TTFT/concurrency rules (control/scaling_decision.py), read from the copies' own /metrics; 0 = off.
    target_concurrency: float = 0.0
    scale_out_queue: float = 0.0
    scale_out_s: float = 30.0
    scale_out_ttft_ms: float = 0.0
    scale_in_queue: float = 0.0
    scale_in_s: float = 120.0

    @property
    def queue_autoscaling(self) -> bool:
        return (self.scale_out_queue > 0 or self.scale_out_ttft_ms > 0 or self.scale_in_queue > 0
                or self.target_concurrency > 0)


@dataclass
class PoolMemory:
    """What the autoscaler remembers between ticks about one pool."""

    below_since: float | None = None  # since when the rate has allowed fewer copies
    size: int | None = None  # the pool's size as the autoscaler last saw or set it


def resized_elsewhere(memory: PoolMemory, current: int, *windows: object) -> bool:
    """Whether the pool's size moved since the autoscaler last saw or set it (a manual `workflow scale`, a
    drain); if so, its windows start again (`memory`'s and each of `windows`' `above_since`/`below_since`):
    a scale-in window that was counting before a manual scale-out must not undo it a second later (issue 31)."""
    moved = memory.size is not None and memory.size != current
    if moved:
        memory.below_since = None
        for window in windows:
            for name in ("above_since", "below_since"):
                if hasattr(window, name):
                    setattr(window, name, None)
    memory.size = current
    return moved


def rate_wants(policy: PoolPolicy, load: Load) -> int | None:
    """The size the rate rule asks for at the measured rate (within the pool's bounds); None when it is off."""
    if not policy.rate_autoscaling or policy.target_requests_per_s <= 0:
        return None
    want = math.ceil(load.rate_rps / policy.target_requests_per_s)
    return max(policy.min_replicas, 1, min(policy.max_replicas, want))


def decide(policy: PoolPolicy, current: int, load: Load, memory: PoolMemory,
           now: float) -> tuple[int, str] | None:
    """The size the pool should have and why, or None to leave it as it is."""
    if policy.min_replicas == 0 and load.idle_s >= policy.scale_to_zero_after_s:
        memory.below_since = None
        if current > 0:
            return 0, (f"no request for {load.idle_s:.0f} s "
                       f"(ScaleToZeroAfter={policy.scale_to_zero_after_s:.0f} s)")
        return None
    want = rate_wants(policy, load)
    if want is None or current == 0:
        return None  # at zero, a request wakes the pool (the proxy holds it meanwhile)
    reason = (f"{load.rate_rps:.2f} req/s over {RATE_WINDOW_S:.0f} s at TargetRequestRate="
              f"{policy.target_requests_per_s:g} per copy")
    if want > current:
        memory.below_since = None
        return want, reason
    if want < current:
        if memory.below_since is None:
            memory.below_since = now
        if now - memory.below_since >= policy.scale_down_delay_s:
            memory.below_since = None
            return want, f"{reason}, for {policy.scale_down_delay_s:.0f} s (ScaleDownDelay)"
        return None
    memory.below_since = None
    return None


def policy_from_annotations(annotations: Mapping[str, object]) -> PoolPolicy | None:
    """The sizing policy an endpoint row keeps for its pool (its PoolFacts), or None for a service endpoint."""
    facts = PoolFacts.from_annotations(annotations)
    if not facts.pool:
        return None
    return PoolPolicy(
        min_replicas=facts.min_replicas, max_replicas=facts.max_replicas,
        target_requests_per_s=facts.target_requests_per_s, scale_down_delay_s=facts.scale_down_delay_s,
        scale_to_zero_after_s=facts.scale_to_zero_after_s, rate_autoscaling=facts.proxy,
        target_concurrency=facts.target_concurrency, scale_out_queue=facts.scale_out_queue,
        scale_out_s=facts.scale_out_s, scale_out_ttft_ms=facts.scale_out_ttft_ms,
        scale_in_queue=facts.scale_in_queue, scale_in_s=facts.scale_in_s,
    )
