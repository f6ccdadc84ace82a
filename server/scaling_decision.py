"""Queue and TTFT scaling: size a pool from its ready copies' own /metrics (waiting requests, recent time
to first token), and combine that with the rate rule (server/autoscaler.decide) into one explained decision.

Scale-out needs only what the fresh copies say (a busy pool must grow even while one copy is silent).
Scale-in needs fresh metrics from every ready copy: a copy that stopped answering may be the one holding
the queue, so removing capacity on the others' word could drop a loaded pool below its load.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from berth.contracts.rollouts import ScalingSignal
from server.autoscaler import PoolPolicy

FRESH_S = 15.0  # a copy's metrics older than this are stale: scale-in waits for them


@dataclass(frozen=True)
class CopyReading:
    """One ready copy as its last scrapes left it."""

    copy_id: str
    waiting: float = 0.0  # vllm:num_requests_waiting
    ttft_s: float | None = None  # mean TTFT between its last two scrapes
    scraped_at: float | None = None  # last successful scrape; None = never


@dataclass
class QueueMemory:
    """What the queue rule remembers between ticks about one pool."""

    above_since: float | None = None  # since when the queue has been above ScaleOutQueue
    below_since: float | None = None  # since when it has been below ScaleInQueue


@dataclass(frozen=True)
class ScalingDecision:
    desired: int
    decision: str  # scale_out | scale_in | hold | steady
    reason: str
    signal: ScalingSignal


def measure(readings: list[CopyReading], now: float, rate_rps: float = 0.0) -> ScalingSignal:
    """The pool's signal: means over the fresh copies, and which ready copies are stale or silent."""
    fresh = [r for r in readings if r.scraped_at is not None and now - r.scraped_at <= FRESH_S]
    ttfts = [r.ttft_s for r in fresh if r.ttft_s is not None]
    return ScalingSignal(
        queue_depth=sum(r.waiting for r in fresh) / len(fresh) if fresh else None,
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


def _held_for(since: float | None, now: float, condition: bool) -> tuple[float | None, float]:
    """The start of a condition's current run (None when it does not hold) and how long it has held."""
    if not condition:
        return None, 0.0
    start = now if since is None else since
    return start, now - start


def decide_queue(policy: PoolPolicy, current: int, readings: list[CopyReading], memory: QueueMemory,
                 now: float) -> ScalingDecision:
    """The queue/TTFT rules' decision for a pool with `current` desired copies."""
    signal = measure(readings, now)
    queue, ttft = signal.queue_depth, signal.ttft_ms
    over = policy.scale_out_queue > 0 and queue is not None and queue > policy.scale_out_queue
    memory.above_since, above_s = _held_for(memory.above_since, now, over)
    slow = policy.scale_out_ttft_ms > 0 and ttft is not None and ttft > policy.scale_out_ttft_ms
    out_reason = None
    if over and above_s >= policy.scale_out_s:
        out_reason = (f"queue {queue:.1f} per copy > ScaleOutQueue={policy.scale_out_queue:g} "
                      f"for {above_s:.0f} s (ScaleOutSeconds={policy.scale_out_s:g})")
    elif slow:
        out_reason = f"mean TTFT {ttft:.0f} ms > ScaleOutTtftMs={policy.scale_out_ttft_ms:g}"
    if out_reason is not None:
        memory.below_since = None
        if current >= policy.max_replicas:
            return ScalingDecision(current, "hold", f"holding at {current} copies (MaxReplicas): {out_reason}",
                                   signal)
        return ScalingDecision(current + 1, "scale_out", out_reason, signal)
    if signal.stale_copies:
        memory.below_since = None  # the quiet window counts only while every copy is heard
        return ScalingDecision(current, "hold", f"holding at {current} copies: {staleness(readings, now)}; "
                               "scale-in waits for fresh metrics from every ready copy", signal)
    return _decide_in(policy, current, signal, memory, now)


def _decide_in(policy: PoolPolicy, current: int, signal: ScalingSignal, memory: QueueMemory,
               now: float) -> ScalingDecision:
    queue = signal.queue_depth
    under = policy.scale_in_queue > 0 and queue is not None and queue < policy.scale_in_queue
    memory.below_since, below_s = _held_for(memory.below_since, now, under)
    shown = "no ready copy" if queue is None else f"queue {queue:.1f} per copy"
    # Zero comes only from the idle rule (ScaleToZeroAfter): an empty queue is not the same as no request.
    floor = max(policy.min_replicas, 1)
    if under and below_s >= policy.scale_in_s and current > floor:
        return ScalingDecision(current - 1, "scale_in", f"{shown} < ScaleInQueue={policy.scale_in_queue:g} for "
                               f"{below_s:.0f} s (ScaleInSeconds={policy.scale_in_s:g})", signal)
    if under and current > floor:
        return ScalingDecision(current, "steady", f"{shown} < ScaleInQueue={policy.scale_in_queue:g} for "
                               f"{below_s:.0f} s of {policy.scale_in_s:g} (ScaleInSeconds)", signal)
    return ScalingDecision(current, "steady", f"{shown} within thresholds at {current} copies", signal)


def combine(current: int, rate: tuple[int, str] | None, queue: ScalingDecision | None,
            signal: ScalingSignal) -> ScalingDecision:
    """One decision from the rate rule's (size, reason) and the queue rule's, carrying `signal`: the larger
    scale-out wins, and a hold from either blocks any scale-in (to zero included)."""
    if queue is not None and queue.decision == "scale_out" and (rate is None or rate[0] <= queue.desired):
        return replace(queue, signal=signal)
    if rate is not None and rate[0] > current:
        return ScalingDecision(rate[0], "scale_out", rate[1], signal)
    if queue is not None and queue.decision == "hold":
        return replace(queue, signal=signal)
    if rate is not None and rate[0] < current:
        return ScalingDecision(rate[0], "scale_in", rate[1], signal)
    if queue is not None:
        return replace(queue, signal=signal)
    return ScalingDecision(current, "steady", f"the rate rule keeps {current} copies", signal)
