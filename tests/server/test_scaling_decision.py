"""Queue/TTFT scaling decisions: out after the window, not before, TTFT, hold at max, hold on stale or
missing metrics (with the copies named), scale-in after its window, and combining with the rate rule."""

from __future__ import annotations

from server.autoscaler import PoolPolicy, policy_from_annotations
from server.scaling_decision import CopyReading, QueueMemory, ScalingDecision, combine, decide_queue, measure

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
