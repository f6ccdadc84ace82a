"""Autoscaler decisions: rate → size, scale-down delay, idle → zero, and the front-door rate window."""

from __future__ import annotations

from control.autoscaler import (
    FrontDoorRates,
    LiteLLMRates,
    Load,
    PoolMemory,
    PoolPolicy,
    ProxiedRates,
    decide,
    policy_from_annotations,
    resized_elsewhere,
)
from control.scaling_decision import QueueMemory

POLICY = PoolPolicy(min_replicas=0, max_replicas=3, target_requests_per_s=2, scale_down_delay_s=5,
                    scale_to_zero_after_s=30)


def test_rate_scales_up_at_once_and_caps_at_max() -> None:
    memory = PoolMemory()
    assert decide(POLICY, 1, Load(rate_rps=5, idle_s=0), memory, 0)[0] == 3  # type: ignore[index]
    assert decide(POLICY, 1, Load(rate_rps=50, idle_s=0), memory, 0)[0] == 3  # type: ignore[index]
    assert decide(POLICY, 3, Load(rate_rps=5.5, idle_s=0), memory, 0) is None


def test_scale_down_waits_for_the_delay() -> None:
    memory = PoolMemory()
    assert decide(POLICY, 3, Load(rate_rps=1, idle_s=0.5), memory, 100) is None
    assert decide(POLICY, 3, Load(rate_rps=1, idle_s=0.5), memory, 104) is None
    decision = decide(POLICY, 3, Load(rate_rps=1, idle_s=0.5), memory, 105)
    assert decision is not None and decision[0] == 1 and "ScaleDownDelay" in decision[1]


def test_a_burst_resets_the_scale_down_clock() -> None:
    memory = PoolMemory()
    decide(POLICY, 3, Load(rate_rps=1, idle_s=0), memory, 100)
    decide(POLICY, 3, Load(rate_rps=6, idle_s=0), memory, 103)
    assert decide(POLICY, 3, Load(rate_rps=1, idle_s=0), memory, 106) is None


def test_idle_goes_to_zero_only_when_min_is_zero() -> None:
    decision = decide(POLICY, 1, Load(rate_rps=0, idle_s=31), PoolMemory(), 0)
    assert decision is not None and decision[0] == 0 and "ScaleToZeroAfter" in decision[1]
    kept = PoolPolicy(min_replicas=1, max_replicas=3, target_requests_per_s=2, scale_to_zero_after_s=30)
    assert decide(kept, 1, Load(rate_rps=0, idle_s=999), PoolMemory(), 0) is None
    assert decide(POLICY, 0, Load(rate_rps=0, idle_s=999), PoolMemory(), 0) is None  # already there


def test_proxy_false_pools_only_scale_to_zero() -> None:
    policy = policy_from_annotations({"pool": True, "proxy": False, "min_replicas": 0, "max_replicas": 3,
                                      "target_requests_per_s": 2, "scale_to_zero_after_s": 30})
    assert policy is not None and not policy.rate_autoscaling
    assert decide(policy, 1, Load(rate_rps=50, idle_s=0), PoolMemory(), 0) is None
    assert decide(policy, 1, Load(rate_rps=0, idle_s=40), PoolMemory(), 0) is not None
    assert policy_from_annotations({}) is None


def test_front_door_rate_window() -> None:
    rates = FrontDoorRates(window_s=10)
    for second in range(10):
        rates.add("ep", 4, 1000.0 + second)
    assert rates.load("ep", 1009.5).rate_rps == 4.0
    assert rates.load("ep", 1015.0).rate_rps == 2.0  # only the reports of 1005..1009 are in the window
    assert rates.load("ep", 1015.0).idle_s == 6.0


def test_litellm_rates_count_each_worker_once() -> None:
    rates = LiteLLMRates(window_s=10)
    born = rates.created_at + 1  # workers started after the API server
    rates.add_snapshot("ep", pid=1, started_at=born, requests_total=20, now=1.0)
    rates.add_snapshot("ep", pid=1, started_at=born, requests_total=30, now=2.0)  # +10
    rates.add_snapshot("ep", pid=2, started_at=born + 1, requests_total=10, now=2.0)  # a second worker
    rates.add_snapshot("ep", pid=1, started_at=born, requests_total=30, now=3.0)  # nothing new
    assert rates.load("ep", 3.0).rate_rps == 4.0  # (20 + 10 + 10) / 10 s


def test_litellm_rates_after_an_api_restart_take_old_totals_as_a_baseline() -> None:
    rates = LiteLLMRates(window_s=10)
    old_worker = rates.created_at - 3600  # served 10,000 requests before this API server started
    rates.add_snapshot("ep", pid=1, started_at=old_worker, requests_total=10_000, now=1.0)
    assert rates.load("ep", 1.0).rate_rps == 0.0
    rates.add_snapshot("ep", pid=1, started_at=old_worker, requests_total=10_005, now=2.0)
    assert rates.load("ep", 2.0).rate_rps == 0.5


def test_proxied_pool_is_idle_only_when_no_door_saw_a_request() -> None:
    litellm, front_door = LiteLLMRates(window_s=10), FrontDoorRates(window_s=10)
    rates = ProxiedRates(litellm, front_door)
    litellm.add_snapshot("ep", pid=1, started_at=litellm.created_at, requests_total=5, now=0.0)
    front_door.add("ep", 1, now=8.0)  # a request held while the pool had no copy
    load = rates.load("ep", 9.0)
    assert load.rate_rps == 0.5 and load.idle_s == 1.0


def test_a_manual_scale_starts_the_windows_again() -> None:
    """Issue 31, item 3: `workflow scale --replicas 2` was undone a second later by a scale-in window that had
    been counting before it; a size the autoscaler did not set restarts its windows (the queue rule's too)."""
    memory, queue = PoolMemory(), QueueMemory(above_since=50.0, below_since=60.0)
    assert not resized_elsewhere(memory, 1, queue)  # first look: nothing to compare with
    assert decide(POLICY, 1, Load(rate_rps=0.5, idle_s=0.5), memory, 100) is None
    memory.below_since = 90.0  # counting toward a scale-in
    assert resized_elsewhere(memory, 2, queue)  # someone scaled to 2
    assert memory.below_since is None and (queue.above_since, queue.below_since) == (None, None)
    assert decide(POLICY, 2, Load(rate_rps=0.5, idle_s=0.5), memory, 101) is None  # the delay counts from now
    assert decide(POLICY, 2, Load(rate_rps=0.5, idle_s=0.5), memory, 105) is None
    assert not resized_elsewhere(memory, 2, queue)  # unchanged: windows keep counting
    decision = decide(POLICY, 2, Load(rate_rps=0.5, idle_s=0.5), memory, 106)
    assert decision is not None and decision[0] == 1
