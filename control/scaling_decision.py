"""Queue, TTFT and concurrency scaling: size a pool from its ready copies' own /metrics (waiting and running
requests, recent time to first token), and combine that with the rate rule (control/autoscaler.decide) into one
explained decision.

Concurrency (TargetConcurrency, on by default: each model entry sets one) is Kubernetes' HPA rule over
requests in flight: the pool needs ceil(in flight / target) copies. It grows to that once it held for
ScaleOutSeconds, and shrinks to it once it held for ScaleInSeconds — never below what the load needs, so a
scale-in cannot make the next tick scale out again (the waiting-only queue rule, alone, could).

Scale-out needs only what the fresh copies say (a busy pool must grow even while one copy is silent).
Scale-in needs fresh metrics from every ready copy: a copy that stopped answering may be the one holding
the queue, so removing capacity on the others' word could drop a loaded pool below its load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from berth.contracts.rollouts import ScalingSignal
from control.autoscaler import PoolPolicy

FRESH_S = 15.0  # a copy's metrics older than this are stale: scale-in waits for them


@dataclass(frozen=True)
class CopyReading:
    """One ready copy as its last scrapes left it."""

    copy_id: str
    waiting: float = 0.0  # vllm:num_requests_waiting
    running: float = 0.0  # vllm:num_requests_running
    ttft_s: float | None = None  # mean TTFT between its last two scrapes
    scraped_at: float | None = None  # last successful scrape; None = never


@dataclass
class QueueMemory:
    """What the queue rule remembers between ticks about one pool."""

    above_since: float | None = None  # since when the queue has been above ScaleOutQueue
    below_since: float | None = None  # since when it has been below ScaleInQueue
    crowded_since: float | None = None  # since when the load has needed more copies than the pool has
    spare_since: float | None = None  # since when it has needed fewer


@dataclass(frozen=True)
class ScalingDecision:
    desired: int
    decision: str  # scale_out | scale_in | hold | steady | refused (a scale-out a quota refused: docs/policies.md)
    reason: str
    signal: ScalingSignal
    # The fewest copies the concurrency rule lets any rule shrink the pool to now (None: no opinion).
    floor: int | None = None


def measure(readings: list[CopyReading], now: float, rate_rps: float = 0.0) -> ScalingSignal:
    """The pool's signal: means over the fresh copies, and which ready copies are stale or silent."""
    fresh = [r for r in readings if r.scraped_at is not None and now - r.scraped_at <= FRESH_S]
    ttfts = [r.ttft_s for r in fresh if r.ttft_s is not None]
    return ScalingSignal(
        queue_depth=sum(r.waiting for r in fresh) / len(fresh) if fresh else None,
        in_flight=sum(r.waiting + r.running for r in fresh) / len(fresh) if fresh else None,
        ttft_ms=1000 * sum(ttfts) / len(ttfts) if ttfts else None,
        rate_rps=rate_rps, ready_copies=len(readings), fresh_copies=len(fresh),
        stale_copies=sorted(r.copy_id for r in readings if r not in fresh))


def staleness(readings: list[CopyReading], now: float) -> str:
    """'copy X's metrics are 40 s old, copy Y has no metrics yet' for the stale copies."""
    parts = [f"copy {r.copy_id} has no metrics yet" if r.scraped_at is None
             else f"copy {r.copy_id}'s metrics are {now - r.scraped_at:.0f} s old"
             for r in sorted(readings, key=lambda r: r.copy_id)
             if r.scraped_at is None or now - r.scraped_at > FRESH_S]
    return ", ".join(parts)


def needed_copies(policy: PoolPolicy, signal: ScalingSignal) -> int | None:
    """ceil(requests in flight / TargetConcurrency), the fresh copies' mean standing for the silent ones;
    None when the rule is off or no copy was heard."""
    if policy.target_concurrency <= 0 or signal.in_flight is None:
        return None
    return math.ceil(round(signal.in_flight * signal.ready_copies / policy.target_concurrency, 6))


def _held_for(since: float | None, now: float, condition: bool) -> tuple[float | None, float]:
    """The start of a condition's current run (None when it does not hold) and how long it has held."""
    if not condition:
        return None, 0.0
    start = now if since is None else since
    return start, now - start


def decide_queue(policy: PoolPolicy, current: int, readings: list[CopyReading], memory: QueueMemory,
                 now: float) -> ScalingDecision:
    """The queue/TTFT/concurrency rules' decision for a pool with `current` desired copies."""
    signal = measure(readings, now)
    needed = needed_copies(policy, signal)
    growth = _growth(policy, current, signal, needed, memory, now)
    if growth is not None:
        size, reason = growth
        memory.below_since = memory.spare_since = None
        if current >= policy.max_replicas:
            return ScalingDecision(current, "hold", f"holding at {current} copies (MaxReplicas): {reason}", signal)
        return ScalingDecision(min(size, policy.max_replicas), "scale_out", reason, signal)
    if signal.stale_copies:
        memory.below_since = memory.spare_since = None  # the quiet windows count only while every copy is heard
        return ScalingDecision(current, "hold", f"holding at {current} copies: {staleness(readings, now)}; "
                               "scale-in waits for fresh metrics from every ready copy", signal)
    return replace(_decide_in(policy, current, signal, needed, memory, now), floor=needed)


def _growth(policy: PoolPolicy, current: int, signal: ScalingSignal, needed: int | None, memory: QueueMemory,
            now: float) -> tuple[int, str] | None:
    """The largest size a scale-out rule asks for now, and why; None when none does."""
    queue, ttft = signal.queue_depth, signal.ttft_ms
    over = policy.scale_out_queue > 0 and queue is not None and queue > policy.scale_out_queue
    memory.above_since, above_s = _held_for(memory.above_since, now, over)
    crowded = needed is not None and needed > current
    memory.crowded_since, crowded_s = _held_for(memory.crowded_since, now, crowded)
    asks: list[tuple[int, str]] = []
    if over and above_s >= policy.scale_out_s:
        asks.append((current + 1, f"queue {queue:.1f} per copy > ScaleOutQueue={policy.scale_out_queue:g} "
                                  f"for {above_s:.0f} s (ScaleOutSeconds={policy.scale_out_s:g})"))
    elif policy.scale_out_ttft_ms > 0 and ttft is not None and ttft > policy.scale_out_ttft_ms:
        asks.append((current + 1, f"mean TTFT {ttft:.0f} ms > ScaleOutTtftMs={policy.scale_out_ttft_ms:g}"))
    if crowded and needed is not None and crowded_s >= policy.scale_out_s:
        asks.append((needed, f"{signal.in_flight:.1f} requests in flight per copy > TargetConcurrency="
                             f"{policy.target_concurrency:g} for {crowded_s:.0f} s (ScaleOutSeconds="
                             f"{policy.scale_out_s:g}): {needed} copies hold them"))
    return max(asks, key=lambda ask: ask[0]) if asks else None


def _decide_in(policy: PoolPolicy, current: int, signal: ScalingSignal, needed: int | None, memory: QueueMemory,
               now: float) -> ScalingDecision:
    """Scale-in when every scale-in rule that is on agrees, to the larger of their sizes."""
    queue = signal.queue_depth
    under = policy.scale_in_queue > 0 and queue is not None and queue < policy.scale_in_queue
    memory.below_since, below_s = _held_for(memory.below_since, now, under)
    spare = needed is not None and needed < current
    memory.spare_since, spare_s = _held_for(memory.spare_since, now, spare)
    # Zero comes only from the idle rule (ScaleToZeroAfter): an empty queue is not the same as no request.
    floor = max(policy.min_replicas, 1)
    shown = "no ready copy" if queue is None else f"queue {queue:.1f} per copy"
    rules: list[tuple[bool, float, int, str]] = []  # (agrees, held for, size, what it says)
    if policy.scale_in_queue > 0:
        rules.append((under, below_s, current - 1, f"{shown} < ScaleInQueue={policy.scale_in_queue:g}"))
    if policy.target_concurrency > 0:
        flight = "no fresh metrics" if signal.in_flight is None else f"{signal.in_flight:.1f} in flight per copy"
        rules.append((spare, spare_s, needed if needed is not None else current,
                      f"{flight} need {needed} copies at TargetConcurrency={policy.target_concurrency:g}"))
    if not rules or current <= floor or not all(agrees for agrees, *_ in rules):
        return ScalingDecision(current, "steady", f"{shown} within thresholds at {current} copies", signal)
    held = min(held for _, held, _, _ in rules)
    size = max(floor, *(size for _, _, size, _ in rules))
    said = "; ".join(what for *_, what in rules)
    if held >= policy.scale_in_s and size < current:
        return ScalingDecision(size, "scale_in", f"{said}, for {held:.0f} s (ScaleInSeconds={policy.scale_in_s:g})",
                               signal)
    return ScalingDecision(current, "steady", f"{said}, for {held:.0f} s of {policy.scale_in_s:g} (ScaleInSeconds)",
                           signal)


def combine(current: int, rate: tuple[int, str] | None, queue: ScalingDecision | None,
            signal: ScalingSignal, rate_wants: int | None = None) -> ScalingDecision:
    """One decision from the rate rule's (size, reason) and the queue rule's, carrying `signal`: the larger
    scale-out wins, a hold from either blocks any scale-in (to zero included), and neither shrinks the pool
    below what the other needs now (`rate_wants`: the rate rule's size at the measured rate, None when off)."""
    if queue is not None and queue.decision == "scale_out" and (rate is None or rate[0] <= queue.desired):
        return replace(queue, signal=signal)
    if rate is not None and rate[0] > current:
        return ScalingDecision(rate[0], "scale_out", rate[1], signal)
    if queue is not None and queue.decision == "hold":
        return replace(queue, signal=signal)
    if rate is not None and rate[0] < current:
        floor = queue.floor if queue is not None and queue.floor is not None else 0
        if floor >= current:
            return ScalingDecision(current, "steady", f"{rate[1]} would leave {rate[0]} copies, but the requests in "
                                   f"flight need {floor}", signal)
        return ScalingDecision(max(rate[0], floor), "scale_in", rate[1], signal)
    if queue is not None and queue.decision == "scale_in" and rate_wants is not None and rate_wants > queue.desired:
        if rate_wants >= current:
            return ScalingDecision(current, "steady", f"{queue.reason}; but the rate rule (TargetRequestRate) needs "
                                   f"{rate_wants} copies", signal)
        return replace(queue, desired=rate_wants, signal=signal)
    if queue is not None:
        return replace(queue, signal=signal)
    return ScalingDecision(current, "steady", f"the rate rule keeps {current} copies", signal)


def capped_by_quota(decision: ScalingDecision, current: int, allowed: int, refusal: str | None) -> ScalingDecision:
    """The decision once the quotas had their say (`allowed`: the largest size they let the pool have now): a
    scale-out they refuse whole is recorded as the decision "refused", with their line, and not tried again until a
    later tick finds room; one they refuse in part goes as far as they allow."""
    if refusal is None or decision.decision != "scale_out" or allowed >= decision.desired:
        return decision
    if allowed <= current:
        return replace(decision, desired=current, decision="refused",
                       reason=f"{refusal} It wanted {decision.desired} copies: {decision.reason}")
    return replace(decision, desired=allowed,
                   reason=f"{decision.reason}; {allowed} of the {decision.desired} copies wanted: {refusal}")
