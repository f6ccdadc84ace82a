"""Queue/TTFT scaling decisions: out after the window, not before, TTFT, hold at max, hold on stale or
missing metrics (with the copies named), scale-in after its window, and combining with the rate rule."""

from __future__ import annotations

from control.autoscaler import PoolPolicy, policy_from_annotations
from control.scaling_decision import (
    CopyReading,
    QueueMemory,
    ScalingDecision,
    capped_by_quota,
    combine,
    decide_queue,
    measure,
)

POLICY = PoolPolicy(min_replicas=1, max_replicas=3, scale_out_queue=4, scale_out_s=30, scale_out_ttft_ms=500,
                    scale_in_queue=1, scale_in_s=60)


def copies(now: float, *waiting: float, ttft_s: float | None = None) -> list[CopyReading]:
    return [CopyReading(copy_id=f"c{i}", waiting=w, ttft_s=ttft_s, scraped_at=now) for i, w in enumerate(waiting)]


def test_queue_above_threshold_for_the_window_scales_out_by_one() -> None:
    memory = QueueMemory()
    assert decide_queue(POLICY, 2, copies(100, 6, 8), memory, 100).decision == "steady"
    decision = decide_queue(POLICY, 2, copies(130, 6, 8), memory, 130)
    assert (decision.decision, decision.desired) == ("scale_out", 3)
    assert "ScaleOutQueue=4" in decision.reason and "7.0 per copy" in decision.reason


def test_queue_above_threshold_not_long_enough_is_steady() -> None:
    memory = QueueMemory()
    decide_queue(POLICY, 2, copies(100, 6, 8), memory, 100)
    assert decide_queue(POLICY, 2, copies(129, 6, 8), memory, 129).decision == "steady"
    decide_queue(POLICY, 2, copies(130, 1, 1), memory, 130)  # the run is broken: the clock starts again
    assert decide_queue(POLICY, 2, copies(140, 6, 8), memory, 140).decision == "steady"


def test_ttft_above_threshold_scales_out_at_once() -> None:
    decision = decide_queue(POLICY, 1, copies(10, 0, ttft_s=0.8), QueueMemory(), 10)
    assert (decision.decision, decision.desired) == ("scale_out", 2)
    assert "mean TTFT 800 ms > ScaleOutTtftMs=500" in decision.reason


def test_at_max_replicas_holds_with_the_reason() -> None:
    decision = decide_queue(POLICY, 3, copies(10, 0, 0, 0, ttft_s=2), QueueMemory(), 10)
    assert (decision.decision, decision.desired) == ("hold", 3)
    assert "MaxReplicas" in decision.reason and "TTFT" in decision.reason


def test_a_stale_copy_holds_scale_in_and_is_named() -> None:
    memory = QueueMemory()
    readings = [CopyReading("c0", waiting=0, scraped_at=100), CopyReading("c1", waiting=0, scraped_at=60)]
    for now in (100, 200):
        decision = decide_queue(POLICY, 2, readings, memory, now)
    assert (decision.decision, decision.desired) == ("hold", 2)
    assert "holding at 2 copies: copy c0's metrics are 100 s old, copy c1's metrics are 140 s old" in decision.reason
    assert "scale-in waits for fresh metrics from every ready copy" in decision.reason
    assert decision.signal.stale_copies == ["c0", "c1"]


def test_missing_metrics_hold() -> None:
    readings = [CopyReading("c0", waiting=0, scraped_at=100), CopyReading("c1")]
    decision = decide_queue(POLICY, 2, readings, QueueMemory(), 101)
    assert decision.decision == "hold" and "copy c1 has no metrics yet" in decision.reason
    assert decision.signal.fresh_copies == 1 and decision.signal.queue_depth == 0


def test_quiet_queue_for_the_window_scales_in_by_one_but_not_below_min() -> None:
    memory = QueueMemory()
    assert decide_queue(POLICY, 2, copies(0, 0, 0), memory, 0).decision == "steady"
    decision = decide_queue(POLICY, 2, copies(60, 0, 0), memory, 60)
    assert (decision.decision, decision.desired) == ("scale_in", 1) and "ScaleInQueue=1" in decision.reason
    assert decide_queue(POLICY, 1, copies(200, 0), memory, 200).decision == "steady"  # at MinReplicas


def test_a_stale_copy_restarts_the_quiet_window() -> None:
    memory = QueueMemory()
    decide_queue(POLICY, 2, copies(0, 0, 0), memory, 0)
    decide_queue(POLICY, 2, [CopyReading("c0", scraped_at=50), CopyReading("c1", scraped_at=20)], memory, 50)
    assert decide_queue(POLICY, 2, copies(70, 0, 0), memory, 70).decision == "steady"


def test_scale_out_counts_only_fresh_copies() -> None:
    memory = QueueMemory()
    readings = [CopyReading("c0", waiting=9, scraped_at=100), CopyReading("c1", waiting=0, scraped_at=0)]
    decide_queue(POLICY, 2, readings, memory, 100)
    decision = decide_queue(POLICY, 2, [CopyReading("c0", waiting=9, scraped_at=130), readings[1]], memory, 130)
    assert (decision.decision, decision.desired) == ("scale_out", 3)


def test_combine_the_larger_out_wins_and_a_hold_blocks_rate_scale_in() -> None:
    signal = measure(copies(0, 5), 0)
    queue_out = ScalingDecision(2, "scale_out", "queue", signal)
    assert combine(1, (3, "rate"), queue_out, signal).desired == 3
    assert combine(1, (2, "rate"), queue_out, signal).reason == "queue"
    hold = ScalingDecision(2, "hold", "stale", signal)
    assert combine(2, (1, "rate"), hold, signal).decision == "hold"
    assert combine(2, (0, "idle"), hold, signal).decision == "hold"
    assert combine(2, (1, "rate"), None, signal).decision == "scale_in"
    assert combine(2, None, None, signal).decision == "steady"


def test_policy_reads_the_thresholds_from_the_annotations() -> None:
    policy = policy_from_annotations({"pool": True, "min_replicas": 1, "max_replicas": 4, "scale_out_queue": 20,
                                      "scale_out_s": 10, "scale_out_ttft_ms": 0, "scale_in_queue": 2,
                                      "scale_in_s": 90})
    assert policy is not None and policy.queue_autoscaling
    assert (policy.scale_out_queue, policy.scale_out_s, policy.scale_in_queue, policy.scale_in_s) == (20, 10, 2, 90)
    plain = policy_from_annotations({"pool": True})
    assert plain is not None and not plain.queue_autoscaling and plain.scale_out_s == 30 and plain.scale_in_s == 120


# Concurrency (issue 31: a model entry's default TargetConcurrency, so raising MaxReplicas is all a user does).
CONCURRENCY = PoolPolicy(min_replicas=1, max_replicas=4, target_concurrency=8, scale_out_s=30, scale_in_s=60)


def in_flight(now: float, *pairs: tuple[float, float]) -> list[CopyReading]:
    """Copies as (running, waiting) pairs, all just scraped."""
    return [CopyReading(copy_id=f"c{i}", running=r, waiting=w, scraped_at=now) for i, (r, w) in enumerate(pairs)]


def test_requests_in_flight_above_the_target_grow_the_pool_to_fit_after_the_window() -> None:
    memory = QueueMemory()
    assert decide_queue(CONCURRENCY, 1, in_flight(100, (8, 12)), memory, 100).decision == "steady"
    decision = decide_queue(CONCURRENCY, 1, in_flight(130, (8, 12)), memory, 130)
    # 20 in flight at 8 per copy: 3 copies at once (HPA's jump), not one per window.
    assert (decision.decision, decision.desired) == ("scale_out", 3), decision.reason
    assert "20.0 requests in flight per copy > TargetConcurrency=8" in decision.reason
    assert decision.signal.in_flight == 20


def test_the_pool_shrinks_only_to_what_its_load_needs_so_it_never_grows_back() -> None:
    memory = QueueMemory()
    # Three copies with 5 in flight each (15): two copies hold 15 at 8 per copy, one would not.
    decide_queue(CONCURRENCY, 3, in_flight(100, (5, 0), (5, 0), (5, 0)), memory, 100)
    decision = decide_queue(CONCURRENCY, 3, in_flight(160, (5, 0), (5, 0), (5, 0)), memory, 160)
    assert (decision.decision, decision.desired) == ("scale_in", 2), decision.reason
    # The same load over the two copies left: 7.5 per copy, within the target, so nothing moves, ever.
    after = QueueMemory()
    for now in (200, 260, 400):
        assert decide_queue(CONCURRENCY, 2, in_flight(now, (7, 0.5), (7, 0.5)), after, now).desired == 2


def test_concurrency_scale_in_waits_for_its_window_and_for_the_queue_rule_where_it_is_on() -> None:
    memory = QueueMemory()
    decide_queue(CONCURRENCY, 2, in_flight(100, (1, 0), (0, 0)), memory, 100)
    steady = decide_queue(CONCURRENCY, 2, in_flight(159, (1, 0), (0, 0)), memory, 159)
    assert steady.decision == "steady" and "of 60 (ScaleInSeconds)" in steady.reason
    both = PoolPolicy(min_replicas=1, max_replicas=4, target_concurrency=8, scale_in_queue=0.5, scale_in_s=60)
    memory = QueueMemory()
    # Little in flight, but a queue: the waiting-only rule disagrees, so no scale-in however long.
    for now in (100, 200, 300):
        assert decide_queue(both, 2, in_flight(now, (1, 1), (0, 1)), memory, now).decision == "steady"


def test_the_rate_rule_never_shrinks_a_pool_below_what_its_requests_in_flight_need() -> None:
    readings = in_flight(100, (8, 6), (8, 6))  # 28 in flight: 4 copies at 8 per copy
    queue = decide_queue(PoolPolicy(min_replicas=1, max_replicas=4, target_concurrency=8, scale_out_s=30),
                         4, readings, QueueMemory(), 100)
    assert queue.floor == 4
    decision = combine(4, (1, "0.10 req/s over 60 s at TargetRequestRate=5 per copy"), queue, queue.signal)
    assert (decision.decision, decision.desired) == ("steady", 4)
    assert "would leave 1 copies, but the requests in flight need 4" in decision.reason
    idle = decide_queue(CONCURRENCY, 2, in_flight(100, (0, 0), (0, 0)), QueueMemory(), 100)
    # An idle pool still goes to zero by the idle rule (ScaleToZeroAfter): nothing is in flight.
    assert combine(2, (0, "no request for 300 s"), idle, idle.signal).desired == 0


def test_the_target_concurrency_travels_from_the_endpoint_row() -> None:
    policy = policy_from_annotations({"pool": True, "min_replicas": 1, "max_replicas": 3, "target_concurrency": 64})
    assert policy is not None and policy.target_concurrency == 64 and policy.queue_autoscaling


def test_a_concurrency_scale_in_never_shrinks_below_what_the_rate_rule_needs() -> None:
    memory = QueueMemory()
    decide_queue(CONCURRENCY, 3, in_flight(100, (1, 0), (0, 0), (0, 0)), memory, 100)
    queue = decide_queue(CONCURRENCY, 3, in_flight(160, (1, 0), (0, 0), (0, 0)), memory, 160)
    assert (queue.decision, queue.desired) == ("scale_in", 1)
    # The rate rule's measure asks for all three (e.g. many short requests): nothing shrinks, and it says why.
    held = combine(3, None, queue, queue.signal, rate_wants=3)
    assert (held.decision, held.desired) == ("steady", 3) and "the rate rule (TargetRequestRate) needs 3" in held.reason
    assert combine(3, None, queue, queue.signal, rate_wants=2).desired == 2  # down to what the rate needs
    assert combine(3, None, queue, queue.signal).desired == 1  # no rate rule: the load's own size


def test_a_quota_caps_a_scale_out_whole_or_in_part_and_leaves_other_decisions_alone() -> None:
    line = "Refused by policy group/ml: max_gpus 8, 8 in use, this needs 2 more."
    out = ScalingDecision(4, "scale_out", "queue 7.0 per copy", measure([], 0))
    refused = capped_by_quota(out, 2, 2, line)
    assert (refused.desired, refused.decision) == (2, "refused")
    assert refused.reason == f"{line} It wanted 4 copies: queue 7.0 per copy"
    part = capped_by_quota(out, 2, 3, line)
    assert (part.desired, part.decision) == (3, "scale_out")
    assert part.reason.endswith(f"3 of the 4 copies wanted: {line}")
    assert capped_by_quota(out, 2, 4, None) is out
    steady = ScalingDecision(2, "steady", "within thresholds", measure([], 0))
    assert capped_by_quota(steady, 2, 2, line) is steady
